"""Does programmatic dependent launch (PDL) overlap two kernels here, eagerly and under CUDA-graph
replay? (dev tool for issue 4, ~20 s on an H200, needs only torch, triton and hltools.timing.)

Kernel A spins SPIN_US µs in every program; with GDC it first executes
``griddepcontrol.launch_dependents``. Kernel B spins SPIN_US µs, then (with GDC)
``griddepcontrol.wait``, and is launched with Triton's ``launch_pdl``. If PDL works, a pair takes
about one spin (B runs while A does); if not, two. Each kernel has PROGRAMS = 66 programs, so A and B
together fit the H200's 132 SMs and can run side by side.

The run recorded in lab/gpu-runs.md (2026-12-01 late) also timed the PDL split-K fill of commit
``4b5b3d0`` (``hlcore.split_k_fill`` + B with a 0 µs spin, against ``zero_()`` + B); that module was
reverted (no gain), so this version times the spin pairs only.

  PYTHONPATH=packages/hltools/src python3 lab/scripts/pdl_overlap.py
"""

from __future__ import annotations

import os
import sys

import torch
import triton
import triton.language as tl

from hltools.timing import time_graph

SPIN_US = float(os.environ.get("SPIN_US", "5"))
PROGRAMS = 66


@triton.jit
def _now():
    return tl.inline_asm_elementwise(
        "mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1
    )


@triton.jit
def _spin_a(x_ptr, spin_ns, GDC: tl.constexpr):
    if GDC:
        tl.extra.cuda.gdc_launch_dependents()
    t0 = _now()
    while _now() - t0 < spin_ns:
        pass
    tl.store(x_ptr + tl.program_id(0), 1)


@triton.jit
def _spin_b(x_ptr, spin_ns, GDC: tl.constexpr):
    t0 = _now()
    while _now() - t0 < spin_ns:
        pass
    if GDC:
        tl.extra.cuda.gdc_wait()
    tl.store(x_ptr + 256 + tl.program_id(0), 1)


def main() -> int:
    x = torch.zeros(1024, dtype=torch.int32, device="cuda")
    ns = int(SPIN_US * 1000)

    def pair(gdc: bool):
        def call():
            _spin_a[(PROGRAMS,)](x, ns, GDC=gdc)
            _spin_b[(PROGRAMS,)](x, ns, GDC=gdc, launch_pdl=gdc)

        return call

    def eager_us(fn, n=200):
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(n):
            fn()
        e.record()
        e.synchronize()
        return s.elapsed_time(e) * 1000 / n

    rows = {}
    for gdc in (False, True):
        rows[f"spin pair, {'PDL' if gdc else 'plain'}, eager"] = eager_us(pair(gdc))
        rows[f"spin pair, {'PDL' if gdc else 'plain'}, graph"] = time_graph([pair(gdc)] * 32).median_us
    print(
        f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, "
        f"spin {SPIN_US} us x {PROGRAMS} programs"
    )
    for k, v in rows.items():
        print(f"{k:<40} {v:8.2f} us per pair")
    return 0


if __name__ == "__main__":
    sys.exit(main())
