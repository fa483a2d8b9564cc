"""A copy of the repo's ``configs/`` with one knob set on every entry of one format, for an engine
run with ``HL_CONFIG_DIR`` pointing at the copy (a lab A/B of a kernel knob before the shipped file
changes; the fallback marks stay as they are).

Usage: ``python3 lab/scripts/configs_with_knob.py --format block_fp8 --set prefetch_scales=true
--out /tmp/hl-configs-pf`` (the value is JSON). Prints how many entries it changed.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--format", required=True)
    p.add_argument("--set", required=True, help="knob=JSON value")
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args()
    knob, value = args.set.split("=", 1)
    value = json.loads(value)
    shutil.rmtree(args.out, ignore_errors=True)
    shutil.copytree(ROOT / "configs", args.out)
    changed = 0
    for path in sorted((args.out / "scaled_mm").glob("*.json")):
        entries = json.loads(path.read_text())
        for e in entries:
            if e.get("key", {}).get("format") == args.format:
                e["config"][knob] = value
                changed += 1
        path.write_text(json.dumps(entries, indent=1) + "\n")
    print(f"{args.out}: {knob}={value!r} on {changed} {args.format} entries")
    return 0 if changed else 1


if __name__ == "__main__":
    raise SystemExit(main())
