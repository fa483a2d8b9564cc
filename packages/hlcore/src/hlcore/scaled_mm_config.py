"""Default (untuned) configs for :mod:`hlcore.scaled_mm`.

Tuned per-shape configs come from ``hltools autotune``; until a shape has one, this heuristic gives a
config that is valid for every (M, N, K) and reasonable at decode sizes on an H100/H200:

* M <= 64 (decode): ``swap_ab`` so N fills the MMA's 64-row side and M (padded to 16) the narrow
  side; ``block_n = 64``, ``block_m = 16`` (or 32/64 for larger M);
* ``split_k``: the smallest power of two that gives at least ~2 programs per SM (132 SMs on H200),
  while each K chunk keeps at least 2 K tiles;
* ``block_k = 128`` (fp8: 128 bytes per row per stage), ``num_stages = 4``, ``num_warps = 4``.

Rule of thumb from the Helion reference notes: an untuned config is several times slower than a
tuned one; this heuristic only avoids the pathological default (one program per 16x16 tile).
"""

from __future__ import annotations

import math

NUM_SMS_H200 = 132


def _next_pow2(x: int) -> int:
    return 1 if x <= 1 else 1 << (x - 1).bit_length()


def default_scaled_mm_config(m: int, n: int, k: int, *, num_sms: int = NUM_SMS_H200) -> dict:
    """A valid ``helion.Config`` dict for the scaled GEMM at ``[M, K] x [K, N]``."""
    if m <= 0 or n <= 0 or k <= 0:
        raise ValueError(f"default_scaled_mm_config: M, N, K must be positive; got {(m, n, k)}")
    block_m = min(64, max(16, _next_pow2(m)))
    block_n = 64 if n >= 64 else max(16, _next_pow2(n))
    block_k = min(128, max(32, _next_pow2(k)))
    tiles = math.ceil(m / block_m) * math.ceil(n / block_n)
    split_k = 1
    while tiles * split_k < 2 * num_sms and k // (split_k * 2) >= 2 * block_k and split_k < 256:
        split_k *= 2
    return {
        "block_sizes": [block_m, block_n, block_k],
        "num_warps": 4,
        "num_stages": 4 if k // split_k >= 4 * block_k else 2,
        "split_k": split_k,
        "swap_ab": m <= 64,
    }
