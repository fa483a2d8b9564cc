"""`hltools autotune --effort grid` with one more neighbour per search group: the group's fastest
config with ``block_k`` 512 where it has 256 and no split-K (K tiles stay whole in a chunk), at
3 and at 4 stages. Helion's LFBO search found such a config 1.5 % faster than the grid's on Qwen3-4B
FP8_Dynamic qkv at M = 8 on an H100 (lab/results/2026-12-06); this asks whether the grid's space
should hold it. One GPU only (the search runs in this process, where the patch is; compile
workers receive their configs). Non-block formats only (block formats tile K by 128).

Superseded since d61edab: ``hltools.grid_search.neighbors`` tries the same two configs itself
(lab/results/2026-12-06-b ran this script); kept as the record of that run.

    python3 lab/scripts/grid_block_k512.py autotune --model qwen3-4b --formats fp8_dynamic \
        --effort grid --gpus 1 --output DIR

Prints, after the run, how many of the file's keys picked ``block_k`` 512. The log's "tuned vs
untuned" column is the run's file against the file in effect (the packaged one: the grid's picks
without this neighbour), in this process.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hltools import grid_search as gs

_neighbors = gs.neighbors


def neighbors(config, m, seen=frozenset()):
    from hlcore.scaled_mm_config import check_scaled_mm_config

    out = _neighbors(config, m, seen)
    block_m, block_n, block_k = config["block_sizes"]
    if block_k == 256 and config.get("split_k", 1) == 1:
        for stages in (3, 4):
            v = {**config, "block_sizes": [block_m, block_n, 512], "num_stages": stages}
            if gs._key(v) not in seen and check_scaled_mm_config(v) is None:
                out.append(v)
    return out


def main() -> int:
    if "--formats" in sys.argv and "block_fp8" in sys.argv[sys.argv.index("--formats") + 1]:
        raise SystemExit("grid_block_k512.py: block_fp8 tiles K by 128; run fp8_dynamic or w8a8_int8")
    gs.neighbors = neighbors
    from hltools.cli import app

    try:
        app(sys.argv[1:])
    finally:
        out = Path(sys.argv[sys.argv.index("--output") + 1]) if "--output" in sys.argv else None
        for path in sorted(out.glob("scaled_mm/*.json")) if out is not None else ():
            entries = [e for e in json.loads(path.read_text()) if "key" in e]
            picked = [e["key"] for e in entries if e["config"]["block_sizes"][2] == 512]
            print(f"{path}: {len(picked)} of {len(entries)} keys picked block_k 512: {picked}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
