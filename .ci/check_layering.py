"""Layering rule: hlcore imports neither vllm nor hltools; hlvllm does not import hltools; and no
package's modules import each other in a cycle.

Walks every .py file under packages/<pkg>/src and packages/<pkg>/tests with the ast module (so
imports inside functions count too) and exits 1 listing each violation. The cycle check reads the
imports among one package's own source modules (``from hlvllm import ops`` is an edge to
``hlvllm.ops``; the package's ``__init__`` is left out) and lists each strongly connected set."""

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {"hlcore": ("vllm", "hlvllm", "hltools"), "hlvllm": ("hltools",)}


def imported_roots(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module.split(".")[0]


def module_graph(pkg: str) -> dict[str, set[str]]:
    """Module name -> the package's own modules it imports (anywhere in the file)."""
    src = ROOT / "packages" / pkg / "src"
    paths = {}
    for path in src.rglob("*.py"):
        parts = path.relative_to(src).with_suffix("").parts
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {name: set() for name in paths}
    for name, path in paths.items():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            else:
                continue
            graph[name] |= {t for t in targets if t in paths and t not in (name, pkg)}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected sets of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def main() -> int:
    bad = []
    for pkg in ("hlcore", "hlvllm", "hltools"):
        bad += [f"import cycle in {pkg}: {' <-> '.join(c)}" for c in cycles(module_graph(pkg))]
    for pkg, forbidden in FORBIDDEN.items():
        for path in sorted((ROOT / "packages" / pkg).rglob("*.py")):
            for lineno, root in imported_roots(path):
                if root in forbidden:
                    bad.append(f"{path.relative_to(ROOT)}:{lineno}: {pkg} must not import {root}")
    for line in bad:
        print(line)
    if not bad:
        print(
            "layering OK: hlcore imports no vllm/hlvllm/hltools; hlvllm imports no hltools; "
            "no import cycle in hlcore, hlvllm or hltools"
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
