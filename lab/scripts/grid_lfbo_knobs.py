"""`hltools autotune --effort grid` with the knobs of Helion's two full-search picks as neighbours:
do they carry over to other shapes and M?

In lab/results/2026-12-06-c `--effort full`, run to its end on Qwen3-4B FP8_Dynamic at M = 8 on an
H100, beat the grid's pick on qkv by 1.7 % (``block_k`` 512 with per-loop unrolling, per-tensor
tensor-descriptor loads, eviction policies, ...) and on gate_up by 1.8 % (``split_k`` 16 with
``swap_ab`` off, which the grid tries at M 24-32 only). Seven hours of such searches would tune one
model; this asks whether a few fixed neighbours get the same for the grid's seconds. Next to each
search group's fastest config at decode M (M <= 32), besides the grid's own neighbours:

* ``qkv knobs`` / ``gate_up knobs``: the config with the Helion knobs of that pick (every field but
  the tiling ones the grid searches: ``block_sizes``, ``split_k``, ``swap_ab``, ``num_warps``,
  ``num_stages``), and the same on its ``block_k`` 512 variants (3 and 4 stages) where it has
  ``block_k`` 256 and no split-K;
* ``swap_ab`` off at M <= 16, alone and with ``split_k`` doubled.

A variant that fails to compile or run times as ``inf`` and is left out, as any grid candidate.
One GPU only (the search runs in this process, where the patch is; compile workers receive their
configs). Non-block formats only (the picks' per-tensor lists are FP8_Dynamic's kernel's; block
formats tile K by 128).

    python3 lab/scripts/grid_lfbo_knobs.py autotune --model qwen3-4b --formats fp8_dynamic \
        --effort grid --gpus 1 --output DIR

Prints, after the run, how many of the file's keys picked each kind of variant. The log's "tuned
vs untuned" column is the run's file against the file in effect (the packaged one), in this
process.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hltools import grid_search as gs

PICKS = Path(__file__).resolve().parents[1] / "results" / "2026-12-06-c" / "raw"
#: The fields the grid searches itself; every other field of a pick is one of its Helion knobs.
TILING = ("block_sizes", "split_k", "swap_ab", "num_warps", "num_stages")
#: Fields of the picks left out as well: ``host_tensor_descriptors`` (False in both, Helion's default)
#: is refused by Triton's CPU interpreter backend ("Unsupported config keys"), where this is checked.
LEFT_OUT = ("host_tensor_descriptors",)


def lfbo_knobs() -> dict[str, dict]:
    """``{"qkv": knobs, "gate_up": knobs}``: the non-tiling fields of the two F1 picks."""
    out = {}
    for name, n in (("qkv", 6144), ("gate_up", 19456)):
        path = PICKS / f"F1-qwen3-4b-fp8_dynamic-n{n}" / "full" / "scaled_mm" / "nvidia_h100_sxm.json"
        entry = next(e for e in json.loads(path.read_text()) if e.get("key", {}).get("n") == n)
        out[name] = {k: v for k, v in entry["config"].items() if k not in TILING + LEFT_OUT}
    return out


KNOBS = lfbo_knobs()
_neighbors = gs.neighbors


def neighbors(config, m, seen=frozenset()):
    from hlcore.scaled_mm_config import check_scaled_mm_config

    out = _neighbors(config, m, seen)
    if m > gs.PRUNE_MAX_M:
        return out
    block_m, block_n, block_k = config["block_sizes"]
    bases = [config]
    if block_k == 256 and config.get("split_k", 1) == 1:
        wide = [block_m, block_n, gs.WIDE_BLOCK_K]
        bases += [{**config, "block_sizes": wide, "num_stages": s} for s in gs.WIDE_BLOCK_K_STAGES]
    variants = [{**base, **knobs} for knobs in KNOBS.values() for base in bases]
    if m <= 16 and config.get("swap_ab", False):
        # split_k doubled even where a chunk is then shorter than a K tile (the grid's space skips
        # those): LFBO's gate_up pick was such a config (split_k 16 over 10 K tiles) and ran
        variants.append({**config, "swap_ab": False})
        variants.append({**config, "swap_ab": False, "split_k": 2 * config.get("split_k", 1)})
    keys = {gs._key(v) for v in out}
    for v in variants:
        if gs._key(v) not in seen and gs._key(v) not in keys and check_scaled_mm_config(v) is None:
            keys.add(gs._key(v))
            out.append(v)
    return out


def kind(config: dict, m: int) -> str:
    """Which variant a config picked at M ``m`` is: ``qkv knobs``, ``gate_up knobs``, ``swap_ab off``
    (at M <= 16 the grid's space has it on) or ``grid``."""
    for name, knobs in KNOBS.items():
        if knobs and all(config.get(k) == v for k, v in knobs.items()):
            return f"{name} knobs"
    return "swap_ab off" if m <= 16 and config.get("swap_ab") is False else "grid"


def main() -> int:
    if "--formats" in sys.argv and "block_fp8" in sys.argv[sys.argv.index("--formats") + 1]:
        raise SystemExit(
            "grid_lfbo_knobs.py: the picks' knobs are FP8_Dynamic's kernel's; run fp8_dynamic or w8a8_int8"
        )
    gs.neighbors = neighbors
    from hltools.cli import app

    try:
        app(sys.argv[1:])
    finally:
        out = Path(sys.argv[sys.argv.index("--output") + 1]) if "--output" in sys.argv else None
        for path in sorted(out.glob("scaled_mm/*.json")) if out is not None else ():
            entries = [e for e in json.loads(path.read_text()) if "key" in e]
            counts: dict[str, list] = {}
            for e in entries:
                key = e["key"]
                counts.setdefault(kind(e["config"], key["m"]), []).append((key["n"], key["k"], key["m"]))
            for k, keys in sorted(counts.items()):
                print(
                    f"{path}: {len(keys)} of {len(entries)} keys picked {k}"
                    + ("" if k == "grid" else f": {keys}")
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
