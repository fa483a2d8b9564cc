"""Layering rule: hlcore imports neither vllm nor hltools; hlvllm does not import hltools.

Walks every .py file under packages/<pkg>/src and packages/<pkg>/tests with the ast module (so
imports inside functions count too) and exits 1 listing each violation."""

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


def main() -> int:
    bad = []
    for pkg, forbidden in FORBIDDEN.items():
        for path in sorted((ROOT / "packages" / pkg).rglob("*.py")):
            for lineno, root in imported_roots(path):
                if root in forbidden:
                    bad.append(f"{path.relative_to(ROOT)}:{lineno}: {pkg} must not import {root}")
    for line in bad:
        print(line)
    if not bad:
        print("layering OK: hlcore imports no vllm/hlvllm/hltools; hlvllm imports no hltools")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
