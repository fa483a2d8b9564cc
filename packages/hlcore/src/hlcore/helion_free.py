"""Running Helion's generated code of hlcore's GEMM from the kernel cache without importing helion.

Importing helion costs seconds in every new process (its compiler, autotuner and backends: ~2.9 s
in a vLLM engine that already imported torch, Inductor and vLLM), yet a kernel loaded from
:mod:`hlcore.kernel_cache` needs none of that: Helion's generated module for the scaled GEMM uses
from Helion only ``helion.cdiv`` and ``helion.next_power_of_2`` in its host code and
``helion.runtime.default_launcher`` to launch the ``@triton.jit`` function. This module provides
those three, so that :func:`rewrite` can point the module's two import lines here:

* :func:`cdiv` and :func:`next_power_of_2`: the same integer arithmetic as ``helion._utils``;
* :func:`default_launcher`: Helion's own launcher, ``helion/runtime/triton/launcher.py``, which
  Helion documents as free of Helion dependencies; it is loaded from helion's installed file
  (found with ``importlib.util.find_spec``, which does not run the package) as a module of its own.
  It calls ``triton_kernel.run(*args, grid=..., warmup=False, num_warps=..., num_stages=...)``.
  Helion's in-process wrapper around it only turns Triton's "incompatible dimensions" error into
  ``helion.exc.ShapeMismatch``.

:func:`rewrite` changes a source only when every use of Helion in it is one of these (the two
exact import lines, ``helion.cdiv(``, ``helion.next_power_of_2(``); anything else (tensor
descriptors' ``helion.runtime.set_triton_allocator()``, ``helion.runtime.triton.helpers`` in
device code, another Helion version's layout) leaves the source as it is, to be loaded with helion
imported. :func:`triton_cache_dir` is Helion's per-device Triton cache directory
(``helion.autotuner.local_cache.helion_triton_cache_dir``), where the cold process's compiled
kernels are found again.

Importing this module imports neither helion nor Triton.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import Any

_IMPORTS = {
    "import helion": "import hlcore.helion_free as helion",
    "from helion.runtime import default_launcher as _default_launcher": (
        "from hlcore.helion_free import default_launcher as _default_launcher"
    ),
}
_USES = frozenset({"cdiv", "next_power_of_2"})
_HELION_WORD = re.compile(r"\bhelion\b")
_HELION_CALL = re.compile(r"\bhelion\.(\w+)\(")


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for integers (``helion.cdiv``)."""
    return (a + b - 1) // b


def next_power_of_2(n: int) -> int:
    """The smallest power of 2 >= ``n``, 1 for ``n <= 0`` (``helion.next_power_of_2``)."""
    if n <= 0:
        return 1
    return 1 << (n - 1).bit_length()


def _helion_dir() -> Path | None:
    spec = importlib.util.find_spec("helion")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


@functools.cache
def _launcher_module() -> Any:
    """``helion/runtime/triton/launcher.py`` loaded as the module ``hlcore._helion_triton_launcher``."""
    root = _helion_dir()
    path = None if root is None else root / "runtime" / "triton" / "launcher.py"
    if path is None or not path.is_file():
        raise ImportError(f"helion's Triton launcher not found ({path})")
    name = "hlcore._helion_triton_launcher"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def default_launcher(triton_kernel: Any, grid: tuple[int, ...], *args: Any, **kwargs: Any) -> Any:
    """Launch ``triton_kernel`` on ``grid`` with ``args`` as Helion's launcher does."""
    return _launcher_module().default_launcher(triton_kernel, grid, *args, **kwargs)


def triton_cache_dir(device_index: int) -> str:
    """Helion's Triton cache directory for ``device_index``: ``$HELION_CACHE_DIR/triton/<index>``,
    else ``<torch Inductor cache dir>/helion/triton/<index>``."""
    user = os.environ.get("HELION_CACHE_DIR")
    if user is not None:
        root = Path(user)
    else:
        from torch._inductor.runtime.cache_dir_utils import cache_dir

        root = Path(cache_dir()) / "helion"
    return str(root / "triton" / str(device_index))


def rewrite(source: str) -> str | None:
    """``source`` (a generated module) with its Helion imports pointed at this module, or None when
    it uses Helion in any other way (then it must be loaded as it is, with helion imported)."""
    lines = source.split("\n")
    out = []
    for line in lines:
        if line in _IMPORTS:
            out.append(_IMPORTS[line])
            continue
        code = line.split("#", 1)[0]
        if _HELION_WORD.search(code):
            calls = _HELION_CALL.findall(code)
            bare = _HELION_WORD.findall(code)
            if not calls or set(calls) - _USES or len(bare) != len(calls):
                return None
        out.append(line)
    if out == lines:
        return None
    return "\n".join(out)
