"""Does the first point of a ``hltools bench kernels`` run read slow? (2026-12-04, eighth session.)

For each ``kernels.json`` (``.json.gz``, or a run's directory) given: the first Helion row of the run, its median over
the same layer's next M with the same config (Helion M1 / M2; the same weight read by the same
grid, though Triton compiles M = 1 as its own variant), vLLM's kernel's ratio at those two points
for comparison, and the same Helion ratio for every later layer of the run (their range). Before
the timer's spin-up (``hlcore.timing.spin_up_seconds``) the first ratio read 1.02-1.09 in 17 of 26
stored runs and the later ones mostly 0.97-1.02 (lab/results/2026-12-04-h).

Usage: ``python3 lab/scripts/first_point.py DIR[/kernels.json] [...]``; prints one line per file.
CPU only.
"""

from __future__ import annotations

import sys

from hltools.results import find_result, read_json


def _layer(r: dict) -> tuple:
    return (r.get("model"), r.get("tp"), r["format"], r["layer"], r["n"], r["k"])


def m1_over_m2(rows: list[dict], layer: tuple, provider: str) -> float | None:
    """``provider``'s median at the layer's smallest M over its next M (Helion: only when both ran
    the same config); None when either is missing."""
    pts = sorted(
        (r for r in rows if r.get("provider") == provider and r.get("median_us") and _layer(r) == layer),
        key=lambda r: r["m"],
    )
    if len(pts) < 2 or (provider == "helion" and pts[0].get("config") != pts[1].get("config")):
        return None
    return pts[0]["median_us"] / pts[1]["median_us"]


def first_point(results: list[dict]) -> dict:
    """The run's first Helion layer with its M1/M2 ratios (Helion, vLLM) and the later layers' Helion
    ratios."""
    helion = [r for r in results if r.get("provider") == "helion" and r.get("median_us")]
    if not helion:
        return {}
    layers = list(dict.fromkeys(_layer(r) for r in helion))
    later = [x for x in (m1_over_m2(results, lay, "helion") for lay in layers[1:]) if x is not None]
    return {
        "layer": layers[0],
        "helion": m1_over_m2(results, layers[0], "helion"),
        "vllm": m1_over_m2(results, layers[0], "vllm"),
        "later": (min(later), max(later)) if later else None,
    }


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    for name in argv:
        fp = first_point(read_json(find_result(name, "kernels.json"), "kernels.json")["results"])
        if not fp:
            print(f"{name}: no Helion rows")
            continue
        later = "-" if fp["later"] is None else f"{fp['later'][0]:.3f}-{fp['later'][1]:.3f}"
        model, tp, fmt, layer = fp["layer"][:4]
        print(
            f"{name}: first point {model} tp{tp} {fmt} {layer}: Helion M1/M2 {_fmt(fp['helion'])}, "
            f"vLLM {_fmt(fp['vllm'])}; later layers' Helion M1/M2 {later}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
