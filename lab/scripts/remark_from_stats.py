"""Re-derive a shipped config file's fallback marks from its stats sidecar with today's rule.

Every entry of a file made by ``hltools configs from-bench`` has its per-process ratios (Helion's
median time over vLLM's default kernel's, one per benchmark process) in the stats sidecar
(``process_ratios``); its mark is :func:`hltools.bench_configs.fallback_mark` of them. When that
rule changes, this rewrites the marks only (configs, layouts and every other field unchanged),
records the re-mark in the file's ``_metadata`` (``remarked``) and prints each flipped key:

    python3 lab/scripts/remark_from_stats.py configs/scaled_mm/nvidia_h200.json \\
        lab/results/config-stats/scaled_mm/nvidia_h200.stats.json

An entry without ratios from at least ``--min-processes`` processes is an error (nothing written).
No GPU needed.
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
from datetime import UTC, datetime

from hlcore import config_store as cs
from hltools.bench_configs import MARGIN, fallback_mark

#: ``from-bench``'s note before the rule's second clause, and the words it has since
OLD_RULE = "in the median over its benchmark processes (one per input file"
NEW_RULE = "in the median over its benchmark processes, or faster in every one of them (one per input file"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config_file")
    ap.add_argument("stats_file")
    ap.add_argument("--margin", type=float, default=MARGIN)
    ap.add_argument("--min-processes", type=int, default=3)
    args = ap.parse_args()

    cf = cs.read_config_file(args.config_file)
    _, stats = cs.read_stats_file(args.stats_file)
    flipped = []
    for kid, entry in cf.entries.items():
        ratios = stats.get(kid, {}).get("process_ratios") or []
        if len(ratios) < args.min_processes:
            raise SystemExit(
                f"{entry.key}: {len(ratios)} process ratios in {args.stats_file}, need {args.min_processes}"
            )
        mark = fallback_mark(ratios, args.margin)
        if mark != entry.fallback:
            flipped.append((entry.key, entry.fallback, mark, ratios))
            cf.entries[kid] = dataclasses.replace(entry, fallback=mark)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    cf.metadata["remarked"] = {
        "command": f"python3 lab/scripts/remark_from_stats.py {args.config_file} {args.stats_file} "
        f"--margin {args.margin} --min-processes {args.min_processes}",
        "commit": commit,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "rule": "marked when vLLM's default kernel is faster than Helion by more than the margin in the "
        "median over the benchmark processes, or faster in every one of them "
        "(hltools.bench_configs.fallback_mark over the stats sidecar's process_ratios)",
        "flipped": len(flipped),
    }
    cf.metadata["note"] = cf.metadata.get("note", "").replace(OLD_RULE, NEW_RULE)
    cs.save_config_file(args.config_file, cf.entries.values(), cf.metadata, merge=False)
    for key, old, new, ratios in sorted(flipped, key=lambda f: tuple(f[0].values())):
        print(
            f"{key['format']} N={key['n']} K={key['k']} M={key['m']}: {old} -> {new} {[round(r, 3) for r in ratios]}"
        )
    marked = sum(e.fallback for e in cf.entries.values())
    print(f"{len(flipped)} marks changed; {marked} of {len(cf.entries)} keys marked -> {args.config_file}")


if __name__ == "__main__":
    main()
