"""On-disk cache of the code Helion generates for hlcore's kernels (``HL_KERNEL_CACHE_DIR``).

The first call of a Helion kernel in a process binds it (traces the body: ~0.3-1.5 s), generates
Triton source (~0.2-0.5 s) and loads it as a module; Triton then compiles the ``@triton.jit``
function on the first launch, from its own on-disk cache when warm. Helion's binding and code
generation are redone in every new process. With ``HL_KERNEL_CACHE_DIR`` set, :func:`cached_kernel`
(applied by :func:`hlcore.helion_compat.local_kernel`) wraps each fixed-config kernel so that a
later process loads the generated module from the directory instead: no bind, no codegen.

Call path of :class:`CachedKernel` (positional calls only; anything else is Helion's own call):

1. in-process dict, keyed by :func:`call_key`: every argument's exact metadata (a tensor or an
   ``nn.Parameter``, the same key for both since Helion specializes them alike: dtype,
   shape, strides, storage offset, device, 16-byte alignment of the data pointer; the type and
   value of a scalar, dtype or None) and which arguments are the same tensor. A hit calls the
   stored host function, as Helion's own fast path calls ``BoundKernel._run``; nothing is hashed.
2. on a miss, the file ``<dir>/<kernel name>/<sha256 of the entry key>.py``: the entry key
   (:meth:`CachedKernel.entry_key`) is the process part (:func:`process_key`: cache format, a
   digest of every hlcore source file, helion/triton/torch/Python versions, ``TRITON_INTERPRET``
   and every ``HELION_*`` variable), the kernel (function module and qualified name, Helion's name
   for it, a digest of the function's source file, the config JSON, Helion's settings or, for a
   lazy kernel, the text of its ``helion.kernel`` arguments), the device (type; for CUDA name,
   compute capability, SM count) and the exact call key above (Helion's specialization key is a
   function of these, so it is not needed). The file is the generated source behind a one-line
   header holding the entry key and the source's sha256; both are checked. It is loaded the way
   ``BoundKernel.compile_config`` loads it (``PyCodeCache.load(source)``, then the module attribute
   named after the kernel, ``TRITON_CACHE_DIR`` set as Helion sets it when unset), with its Helion imports
   pointed at :mod:`hlcore.helion_free` when those are all it uses of Helion
   (:func:`hlcore.helion_free.rewrite`): with a lazy kernel (:meth:`CachedKernel.lazy`, hlcore's
   GEMM), a process whose calls all load from the cache never imports helion.
3. otherwise Helion's normal call (bind, codegen, compile, run); afterwards the bound kernel Helion
   keeps for these arguments is looked up in ``Kernel._bound_kernels`` (no second bind) and the
   source of its host function's module is written to the entry (atomically, after checking the
   file is the one ``PyCodeCache`` wrote for that source).

Triton's own cache: every first call (a disk hit's first run, and Helion's call on a miss, which is
what :mod:`hlcore.kernel_pool`'s workers make) runs with Triton's cache directory at
``<dir>/triton`` (:func:`triton_cache_scope`; Triton's ``knobs.cache.dir``, the environment left
as it is), so the compiled kernels and launchers the workers wrote are the ones the process finds.
Without it a process looks where ``TRITON_CACHE_DIR`` points at its first run; when that is unset,
Inductor sets it to its own folder at vLLM's first compile, after the workers were spawned (which
use Helion's). The key must match too: :func:`use_inductors_ptxas`. Triton's cache is
content-addressed, so where it lives changes what is compiled, never a result.

Why exact metadata and not only Helion's specialization key: Helion's in-process key is completed
by extractors it discovers while binding (``hl.specialize``'d sizes, guards on size-1 dims,
tensor-descriptor layouts), which a fresh process does not have until it binds. An entry is
therefore only ever used for arguments whose full metadata equals that of a call Helion itself ran
with that very code in an earlier process: exactly as correct as Helion's in-process cache was
there. The price is one entry (a copy of the same source) per distinct M; each is a file read of
a few kB in a warm process.

Any failure in the cache path (unsupported argument, unreadable or corrupt file, key or checksum
mismatch, import error of the cached source, error of its first run) logs one warning or debug
line and takes Helion's normal path; a corrupt or failing entry is rewritten after that call. Not
enabled: ``HL_KERNEL_CACHE_DIR`` unset or empty (plain Helion kernels, unchanged), ``HELION_INTERPRET=1``
(no code generation), kernels without exactly one fixed config, with a ``key=`` function, a
non-Triton backend, or ``print_output_code`` / ``print_repro``. In vLLM, ``hlvllm`` sets
``HL_KERNEL_CACHE_DIR`` to ``<VLLM_CACHE_ROOT>/hlcore_kernels`` when it is unset (``hlvllm.plugin``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from hlcore import helion_free
from hlcore.config_store import write_text_atomic

log = logging.getLogger(__name__)

ENV_VAR = "HL_KERNEL_CACHE_DIR"
FORMAT = "hl-kernel-cache 2"  # 2: no Helion specialization key in the entry key
_HEADER = f"# {FORMAT} "

#: Counters of this process (``stats()``): in-process hits are not counted (hot path).
_STATS = {"disk_hits": 0, "misses": 0, "writes": 0, "errors": 0}
#: Host seconds of this process's disk hits (``load_seconds()``).
_LOAD_SECONDS = {"import": 0.0, "first_run": 0.0}
clock = time.perf_counter  # tests put a fake clock here
_Tensor, _Parameter = torch.Tensor, torch.nn.Parameter
_PLAIN_TYPES = frozenset((bool, int, str, torch.dtype, torch.device, type(None)))
_HELION_PATH = object()  # in-process marker: these arguments always take Helion's own call
_warned: set[str] = set()


class CacheEntryError(Exception):
    """A cache file that cannot be used (unreadable, corrupt, another key, failing source)."""


def stats() -> dict[str, int]:
    """This process's counters: ``disk_hits``, ``misses`` (Helion's normal path ran), ``writes``,
    ``errors`` (failures in the cache path, each also logged)."""
    return dict(_STATS)


def load_seconds() -> dict[str, float]:
    """Host seconds this process's disk hits took: ``import`` (reading the entry and importing its
    module) and ``first_run`` (the first call of the loaded code: Triton's launcher and binary,
    compiled here unless Triton's cache of these kernels, ``<dir>/triton``, holds them for these
    arguments' specialization, then the launch; the kernel's run on the device is asynchronous and not in it)."""
    return dict(_LOAD_SECONDS)


def cache_dir_from_env() -> Path | None:
    """``HL_KERNEL_CACHE_DIR`` as a path (``~`` expanded), or None when unset or empty."""
    raw = os.environ.get(ENV_VAR, "").strip()
    return Path(raw).expanduser() if raw else None


TRITON_SUBDIR = "triton"  # <HL_KERNEL_CACHE_DIR>/triton: Triton's cache of hlcore's kernels
_TRITON_SCOPE_LOCK = threading.Lock()
_triton_scope: dict[str, Any] = {"depth": 0, "saved": None}
_UNSET = object()


@contextlib.contextmanager
def triton_cache_scope(cache_dir: Path) -> Iterator[None]:
    """Triton's cache directory is ``cache_dir / "triton"`` while the block runs.

    Sets Triton's ``knobs.cache.dir`` override (not ``TRITON_CACHE_DIR``: the environment, which
    vLLM and Inductor set for their own kernels, is left as it is) and restores the previous
    override when the outermost block of the process ends; blocks entered meanwhile, on this or
    another thread, keep the first block's directory. While a block is open, every Triton compile
    of the process, on any thread, uses that directory. A Triton without ``triton.knobs`` (< 3.4):
    nothing changes; nor when the directory cannot be made or written (Triton would fail there;
    its own directory keeps working). Triton's cache is content-addressed: the directory decides
    only whether a compiled kernel or launcher is found, never what a kernel computes."""
    knobs = _triton_knobs()
    directory = Path(cache_dir) / TRITON_SUBDIR
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if not os.access(directory, os.W_OK | os.X_OK):
            raise PermissionError(f"{directory} is not writable")
    except OSError as e:  # Triton would fail to write there: leave its directory as it is
        log.debug("hlcore kernel cache: Triton's cache stays where it is (%s: %r)", directory, e)
        knobs = None
    if knobs is None:
        yield
        return
    entered = False
    try:
        with _TRITON_SCOPE_LOCK:
            if _triton_scope["depth"] == 0:
                _triton_scope["saved"] = knobs.cache.__dict__.get("dir", _UNSET)
                knobs.cache.__dict__["dir"] = str(directory)  # the descriptor's override, no setenv
            _triton_scope["depth"] += 1
            entered = True
        yield
    finally:
        if entered:
            with _TRITON_SCOPE_LOCK:
                _triton_scope["depth"] -= 1
                if _triton_scope["depth"] == 0:
                    saved = _triton_scope["saved"]
                    if saved is _UNSET:
                        knobs.cache.__dict__.pop("dir", None)
                    else:
                        knobs.cache.__dict__["dir"] = saved


def use_inductors_ptxas() -> str | None:
    """Point Triton at the ptxas Inductor will pick, now: ``TRITON_PTXAS_PATH`` set to torch's
    bundled ``ptxas`` when it is unset (``torch._inductor.runtime.compile_tasks._set_triton_ptxas_path``,
    Inductor's own rule, which it applies before its first Triton compile in a process).

    Triton's cache key of a compiled kernel holds the ptxas version (the CUDA backend's ``hash()``),
    and each process fixes that version at its first Triton compile. A vLLM engine switches to
    torch's ptxas (CUDA 13.0 in torch 2.11+cu130; Triton 3.6 bundles 12.8) when its torch.compile
    starts, after :mod:`hlcore.kernel_pool`'s workers were spawned, so without this the workers
    compiled every kernel under keys the engine never asks for. Called by ``hlvllm.plugin``
    before anything compiles; the workers inherit the variable. Returns ``TRITON_PTXAS_PATH``
    after the call (None: unset, e.g. a torch without a bundled ptxas, or the private function
    gone, which is logged at debug level and changes nothing)."""
    try:
        from torch._inductor.runtime.compile_tasks import _set_triton_ptxas_path

        _set_triton_ptxas_path()
    except Exception as e:  # noqa: BLE001 - a torch without it: Triton keeps its own choice
        log.debug("hlcore kernel cache: Inductor's ptxas rule unavailable (%r)", e)
    return os.environ.get("TRITON_PTXAS_PATH")


def _triton_knobs() -> Any:
    try:
        from triton import knobs
    except ImportError:
        return None
    return knobs if hasattr(knobs, "cache") else None


def _warn(kind: str, message: str, *args: object) -> None:
    """A warning the first time per ``kind`` in this process, debug lines after that."""
    _STATS["errors"] += 1
    level = logging.DEBUG if kind in _warned else logging.WARNING
    _warned.add(kind)
    log.log(level, message, *args)


# --------------------------------------------------------------------------------------------
# Keys
# --------------------------------------------------------------------------------------------
@functools.cache
def source_digest() -> str:
    """sha256 of every ``*.py`` file of the hlcore package (relative path and bytes), once per
    process: kernel bodies, their host wrappers and the Helion patches of ``helion_compat``."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        h.update(path.relative_to(root).as_posix().encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


@functools.cache
def _file_digest(path: str) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return "unreadable"


@functools.cache
def _versions() -> tuple:
    from importlib.metadata import PackageNotFoundError, version

    def dist_version(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "?"

    return (
        ("helion", dist_version("helion")),
        ("triton", dist_version("triton")),
        ("torch", torch.__version__),
        ("cuda", torch.version.cuda),
        ("hip", getattr(torch.version, "hip", None)),
        ("python", sys.version_info[:2]),
    )


def process_key() -> str:
    """What every entry of this process shares (see the module docstring)."""
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith("HELION_"))
    parts = [
        ("format", FORMAT),
        ("hlcore_sources", source_digest()),
        *_versions(),
        ("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "")),
        ("HELION_env", env),
    ]
    return repr(parts)


@functools.cache
def _device_key(device: torch.device) -> str:
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        return repr(
            (
                "cuda",
                props.name,
                torch.cuda.get_device_capability(index),
                props.multi_processor_count,
            )
        )
    return repr((device.type,))


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def stable_repr(obj: Any) -> str:
    """``repr`` that is the same in every process: sets sorted, classes and functions by module
    and qualified name, memory addresses dropped."""
    if isinstance(obj, (frozenset, set)):
        return "{" + ", ".join(sorted(stable_repr(x) for x in obj)) + "}"
    if isinstance(obj, tuple):
        return "(" + ", ".join(stable_repr(x) for x in obj) + ",)"
    if isinstance(obj, list):
        return "[" + ", ".join(stable_repr(x) for x in obj) + "]"
    if isinstance(obj, dict):
        items = sorted((stable_repr(k), stable_repr(v)) for k, v in obj.items())
        return "{" + ", ".join(f"{k}: {v}" for k, v in items) + "}"
    if isinstance(obj, type) or callable(obj) and hasattr(obj, "__qualname__"):
        return f"<{getattr(obj, '__module__', '?')}.{obj.__qualname__}>"
    return _ADDRESS.sub("", repr(obj))


def call_key(args: Sequence[object]) -> tuple | None:
    """The exact metadata of positional ``args`` (see the module docstring), or None when an
    argument is of another kind (then the call is Helion's own). ~1 us per tensor argument."""
    key = []
    append = key.append
    tensors = []
    for a in args:
        t = type(a)
        if t is _Tensor or t is _Parameter:  # one key for both: Helion specializes them alike
            append((_Tensor, a.dtype, a.shape, a.stride(), a.storage_offset(), a.device, a.data_ptr() & 15))
            tensors.append(a)
        elif t in _PLAIN_TYPES:
            append((t, a))
        elif t is float:
            append((t, a.hex()))  # exact, and NaN equals itself
        else:
            return None
    if len(tensors) > 1 and len(set(map(id, tensors))) != len(tensors):
        # the same tensor passed twice (Helion's key has this too): index of its first occurrence
        append(("aliases", tuple(next(i for i, b in enumerate(tensors) if b is a) for a in tensors)))
    return tuple(key)


def _call_key_text(key: tuple) -> str:
    parts = []
    for item in key:
        if item[0] == "aliases":
            parts.append(f"aliases{item[1]!r}")
        elif len(item) == 7:
            t, dtype, shape, stride, offset, device, misalign = item
            parts.append(
                f"{t.__module__}.{t.__qualname__}({dtype}, {tuple(shape)}, {stride}, offset={offset}, "
                f"{device}, ptr%16={misalign})"
            )
        else:
            parts.append(f"{item[0].__qualname__}({item[1]!r})")
    return "[" + ", ".join(parts) + "]"


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------
def read_entry(path: Path, entry_key: str, name: str) -> str | None:
    """The generated source stored at ``path`` for ``entry_key``; None if there is no file;
    :class:`CacheEntryError` if it cannot be used."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise CacheEntryError(f"unreadable: {e}") from e
    try:
        header, sep, source = raw.decode("utf-8").partition("\n")
        if not sep or not header.startswith(_HEADER):
            raise ValueError("no header")
        meta = json.loads(header[len(_HEADER) :])
    except (UnicodeDecodeError, ValueError) as e:
        raise CacheEntryError(f"corrupt header ({e})") from e
    if not isinstance(meta, dict) or meta.get("key") != entry_key or meta.get("name") != name:
        raise CacheEntryError("header names another key")
    if hashlib.sha256(source.encode("utf-8")).hexdigest() != meta.get("source_sha256"):
        raise CacheEntryError("source checksum mismatch (truncated or modified)")
    return source


def write_entry(path: Path, entry_key: str, name: str, source: str) -> None:
    """Write the entry atomically (:func:`hlcore.config_store.write_text_atomic`: a temporary file in
    the same directory, then ``os.replace``, with the mode a plainly written file would have)."""
    meta = {
        "key": entry_key,
        "name": name,
        "source_sha256": hashlib.sha256(source.encode("utf-8")).hexdigest(),
    }
    write_text_atomic(path, _HEADER + json.dumps(meta, sort_keys=True) + "\n" + source)


# --------------------------------------------------------------------------------------------
# The wrapper
# --------------------------------------------------------------------------------------------
def _unsupported_reason(kernel: Any) -> str | None:
    """Why ``kernel`` (a ``helion.Kernel``) is not cached, or None."""
    if os.environ.get("HELION_INTERPRET") == "1":
        return "HELION_INTERPRET=1 (no code generation)"
    for attr in (
        "_base_specialization_key",
        "_get_bound_kernel_cache_key",
        "_bound_kernels",
        "signature",
        "_compute_is_distributed",
    ):
        if not hasattr(kernel, attr):
            return f"this Helion has no Kernel.{attr}"
    settings = kernel.settings
    ref_mode = getattr(settings, "ref_mode", None)
    if ref_mode is not None and getattr(ref_mode, "value", ref_mode) != "off":
        return "Helion's reference (eager) mode"
    if getattr(settings, "backend", "triton") != "triton":
        return f"backend {settings.backend!r}"
    if getattr(kernel, "_key_fn", None) is not None:
        return "a key= function"
    if getattr(kernel, "cute_structural_policy", None) is not None:
        return "a CuTe structural policy"
    if len(kernel.configs) != 1:
        return f"{len(kernel.configs)} configs (needs exactly one fixed config)"
    if getattr(settings, "print_output_code", False) or getattr(settings, "print_repro", False):
        return "print_output_code / print_repro"
    return None


def cached_kernel(kernel: Any, cache_dir: str | os.PathLike | None = None) -> Any:
    """``kernel`` (a ``helion.Kernel``) wrapped in a :class:`CachedKernel` over ``cache_dir``
    (default ``HL_KERNEL_CACHE_DIR``); ``kernel`` itself when no directory is set or the kernel
    cannot be cached (see the module docstring)."""
    directory = Path(cache_dir) if cache_dir is not None else cache_dir_from_env()
    if directory is None or isinstance(kernel, CachedKernel):
        return kernel
    reason = _unsupported_reason(kernel)
    if reason is not None:
        log.debug("kernel cache off for %s: %s", getattr(kernel, "name", kernel), reason)
        return kernel
    return CachedKernel(kernel, directory)


_MAKE_LOCK = threading.Lock()  # CachedKernel.lazy: one kernel made at a time
_OWN = frozenset(
    {"_kernel", "_factory", "_passthrough", "_identity", "_runs", "_num_params", "cache_dir", "name"}
)


class CachedKernel:
    """A ``helion.Kernel`` with the in-process and on-disk generated-code cache in front of its
    call; every other attribute (``configs``, ``bind``, ``settings``, ...) is the kernel's.

    Made with :meth:`lazy`, the kernel is described without helion (its body function, config JSON
    and the text of its ``helion.kernel`` arguments) and made by its factory only when a call misses
    the cache or another attribute is asked for: a process whose calls all load from the cache never
    imports helion (:mod:`hlcore.helion_free`)."""

    def __init__(self, kernel: Any, cache_dir: Path) -> None:
        self._setup(cache_dir, kernel.name, len(kernel.signature.parameters), kernel=kernel)

    def _setup(self, cache_dir, name, num_params, *, kernel=None, factory=None, identity=None) -> None:
        self._kernel = kernel
        self._factory: Callable[[], Any] | None = factory
        self._passthrough = False  # a lazy kernel that turned out uncacheable: Helion's call only
        self.cache_dir = Path(cache_dir)
        self._runs: dict[tuple, Any] = {}
        self._num_params = num_params
        self.name = name
        self._identity = identity  # lazy: (body function, config JSON, helion.kernel arguments)

    @classmethod
    def lazy(
        cls, factory: Callable[[], Any], cache_dir: Path, *, fn: Callable, config_json: str, settings: str
    ) -> CachedKernel:
        """A kernel that ``factory`` makes on first need (a ``helion.Kernel`` of body ``fn`` with
        the one config ``config_json``, made with the ``helion.kernel`` arguments ``settings``,
        whose text keys its entries with the hlcore sources, versions and ``HELION_*`` variables)."""
        self = cls.__new__(cls)
        num_params = len(inspect.signature(fn).parameters)
        self._setup(cache_dir, fn.__name__, num_params, factory=factory, identity=(fn, config_json, settings))
        return self

    @property
    def kernel(self) -> Any:
        """The ``helion.Kernel`` (made now if this is a lazy kernel not made yet, once per object
        when threads ask at the same time)."""
        if self._kernel is None:
            with _MAKE_LOCK:
                return self._make()
        return self._kernel

    def _make(self) -> Any:
        if self._kernel is None:
            kernel = self._factory()
            reason = _unsupported_reason(kernel)
            if reason is not None or kernel.name != self.name:
                log.debug("kernel cache off for %s: %s", self.name, reason or "another kernel name")
                self._passthrough = True
            self._kernel = kernel
        return self._kernel

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in _OWN:  # not set yet (copies, pickling): no recursion
            raise AttributeError(name)
        return getattr(self.kernel, name)

    def __repr__(self) -> str:
        return f"CachedKernel({self._kernel or self.name!r}, {str(self.cache_dir)!r})"

    def __call__(self, *args: object, **kwargs: object) -> Any:
        if not kwargs and len(args) == self._num_params and not self._passthrough:
            try:
                key = call_key(args)
            except Exception:  # e.g. a tensor without storage (fake, under tracing)
                key = None
            if key is not None:
                run = self._runs.get(key)
                if run is not None and run is not _HELION_PATH:
                    return run(*args)
                if run is None:
                    return self._first_call(args, key)
        return self.kernel(*args, **kwargs)

    def reset(self) -> None:
        """Forget this process's entries and reset the Helion kernel (files stay)."""
        self._runs.clear()
        if self._kernel is not None:
            self._kernel.reset()

    # ---- keys -------------------------------------------------------------------------------
    @functools.cached_property
    def _kernel_key(self) -> str:
        if self._identity is not None:  # lazy: described without helion
            fn, config, settings = self._identity
        else:
            k = self.kernel
            fn, config = k.fn, k.configs[0].to_json()
            settings = stable_repr(
                {
                    name: value
                    for name, value in k.settings.to_dict().items()
                    if not name.startswith("autotune") and name != "autotuner_fn"
                }
            )
        try:
            fn_file = _file_digest(inspect.getsourcefile(fn) or "")
        except TypeError:
            fn_file = "unknown"
        parts = {
            "function": f"{fn.__module__}.{fn.__qualname__}",
            "name": self.name,
            "function_file": fn_file,
            "config": config,
            "settings": settings,
        }
        return repr(sorted(parts.items()))

    def entry_key(self, args: Sequence[object], key: tuple) -> str:
        """The full text the entry file is named by (sha256) and checked against. Helion's
        specialization key of ``args`` is not part of it: it is a function of the arguments' exact
        metadata (``args=``), the kernel and helion's version, all of which are."""
        return "\n".join(
            [
                f"process={process_key()}",
                f"kernel={self._kernel_key}",
                f"device={_device_key(_first_device(args))}",
                f"args={_call_key_text(key)}",
            ]
        )

    def entry_path(self, entry_key: str) -> Path:
        digest = hashlib.sha256(entry_key.encode("utf-8")).hexdigest()[:40]
        return self.cache_dir / self.name / f"{digest}.py"

    # ---- slow path --------------------------------------------------------------------------
    def _first_call(self, args: tuple, key: tuple) -> Any:
        """First call with this exact metadata in this process: the file, else Helion."""
        if torch.compiler.is_compiling():
            return self.kernel(*args)
        entry_key = path = None
        t0 = clock()
        try:
            entry_key = self.entry_key(args, key)
            path = self.entry_path(entry_key)
            run = self._load(path, entry_key, args)
        except CacheEntryError as e:
            _warn("corrupt", "hlcore kernel cache: %s: %s; using Helion and rewriting it", path, e)
            run = None
        except Exception as e:
            _warn("lookup", "hlcore kernel cache: lookup failed for %s (%r); using Helion", self.name, e)
            run = None
        if run is not None:
            t1 = clock()
            try:
                with triton_cache_scope(self.cache_dir):
                    result = run(*args)
            except Exception as e:
                _warn(
                    "run",
                    "hlcore kernel cache: cached code of %s failed (%r); using Helion and rewriting it",
                    path,
                    e,
                )
            else:
                _STATS["disk_hits"] += 1
                _LOAD_SECONDS["import"] += t1 - t0
                _LOAD_SECONDS["first_run"] += clock() - t1
                self._runs[key] = run
                log.debug("hlcore kernel cache: hit %s", path)
                return result
        _STATS["misses"] += 1
        with triton_cache_scope(self.cache_dir):
            result = self.kernel(*args)
        if not self._passthrough:  # a lazy kernel that turned out uncacheable writes nothing
            self._runs[key] = self._store(args, entry_key, path)
        return result

    def _load(self, path: Path, entry_key: str, args: tuple) -> Callable | None:
        """The host function of the entry at ``path``; None if there is none."""
        source = read_entry(path, entry_key, self.name)
        if source is None:
            return None
        try:
            from torch._inductor.codecache import PyCodeCache

            _setup_triton_cache_dir(args)
            # what BoundKernel.compile_config does (extra=""); its Helion imports pointed at
            # hlcore.helion_free where that is all it uses of Helion (no helion import here)
            module = PyCodeCache.load(helion_free.rewrite(source) or source)
            run = getattr(module, self.name)
        except Exception as e:
            raise CacheEntryError(f"cannot load the cached source ({e!r})") from e
        if not callable(run):
            raise CacheEntryError(f"{self.name} in the cached source is not a function")
        return run

    def _store(self, args: tuple, entry_key: str | None, path: Path | None) -> Any:
        """After Helion's own call: the host function Helion keeps for ``args`` (the value for the
        in-process dict; :data:`_HELION_PATH` if it cannot be found), its source written to
        ``path``."""
        try:
            k = self.kernel
            signature = k._base_specialization_key(args)
            cache_key = k._get_bound_kernel_cache_key(args, signature)
            bound = None if cache_key is None else k._bound_kernels.get(cache_key)
            run = getattr(bound, "_run", None)
            if run is None or getattr(run, "__name__", None) != k.name:
                log.debug("hlcore kernel cache: no compiled bound kernel of %s for these args", k.name)
                return _HELION_PATH
        except Exception as e:
            _warn("harvest", "hlcore kernel cache: cannot find %s's compiled code (%r)", self.name, e)
            return _HELION_PATH
        if entry_key is None or path is None:
            return run
        try:
            module_file = run.__globals__["__file__"]
            source = Path(module_file).read_text(encoding="utf-8")
            if not _is_pycodecache_file(module_file, source):
                log.debug(
                    "hlcore kernel cache: %s is not PyCodeCache's file of its source; not cached", module_file
                )
                return run
            write_entry(path, entry_key, k.name, source)
            _STATS["writes"] += 1
            log.debug("hlcore kernel cache: wrote %s", path)
        except Exception as e:
            _warn("write", "hlcore kernel cache: cannot write %s (%r)", path, e)
        return run


def _is_pycodecache_file(module_file: str, source: str) -> bool:
    """Whether ``module_file`` is where ``PyCodeCache.load(source)`` puts ``source``: its name is
    the hash of the text, so the read text is exactly what Helion loaded."""
    from torch._inductor.codecache import get_hash

    return Path(module_file).stem == get_hash(source.strip(), "", "code")


def _first_device(args: Sequence[object]) -> torch.device:
    for a in args:
        if isinstance(a, torch.Tensor):
            return a.device
    return torch.device("cpu")


def _setup_triton_cache_dir(args: Sequence[object]) -> None:
    """What ``BoundKernel.compile_config`` does first (Triton backend): Triton's cache directory
    under Helion's cache root, per device index, unless ``TRITON_CACHE_DIR`` is set."""
    if "TRITON_CACHE_DIR" in os.environ:
        return
    index = _first_device(args).index
    os.environ["TRITON_CACHE_DIR"] = helion_free.triton_cache_dir(index if index is not None else 0)
