"""Analysis of the aux-kernel config sweep (``lab/scripts/sweep_aux_configs.py``, issue 5): how far each
generic config the pick rule chooses (:mod:`hlcore.aux_configs`) is from the best timed config per
shape, and a re-derived config set and rule. Pure Python (no torch, no GPU): the GPU script times,
this module judges, the tests feed it fake timings.

Input: timing records, one per (kernel, num_tokens, hidden, provider[, config])::

    {"kernel": "rms_norm", "num_tokens": 16, "hidden": 4096, "provider": "helion" | "vllm",
     "config": "row1_w4" (helion) | None (vllm), "median_us": 3.1 | None, "wrong": False,
     "error": None | "...", "vs_vllm": 1e-3}

A Helion record counts only with a ``median_us``, no ``error`` and not ``wrong`` (its output
disagreed with vLLM's: :func:`mark_wrong`).

Output of :func:`analyze`, per kernel:

* ``cases``: per (num_tokens, hidden) the best config, the picked config, picked / best time, the
  vLLM time and the speedups vs vLLM of the picked and of the best config;
* ``picked_vs_best``: geomean and max of picked / best (and where the max is), how often the pick
  is the best, cases where the picked config was wrong or not timed;
* ``best_counts``: in how many cases each config is the best;
* ``derived_set``: the smallest subset of the timed configs whose per-shape best is within
  ``tolerance`` (default 5 %) of the overall best on every case (exhaustive over subsets for up to
  12 configs, greedy above), with the loss of the best subset of each size (``by_size``);
* ``rule``: the derived set's best config per case, compressed into
  ``(num_tokens range, hidden range) -> config`` rows.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

TOLERANCE = 0.05
#: disagreement with vLLM's output above which a config is wrong whatever the other configs do
#: (quants: fraction of unequal bytes; norms/silu: max relative difference)
WRONG_ABOVE = {"quant": 0.25, "other": 0.5}
#: ... and above which it is wrong if it is also 4x worse than the best-agreeing config of the case
WRONG_FLOOR = {"quant": 0.02, "other": 0.05}

Case = tuple[int, int]  # (num_tokens, hidden)


def _family(kernel: str) -> str:
    return "quant" if "quant" in kernel else "other"


def mark_wrong(kernel: str, errors: Mapping[str, float | None]) -> set[str]:
    """Configs of one case whose output disagrees with vLLM's (``errors``: config -> the GPU
    script's ``vs_vllm``, None or NaN when it could not be checked). Wrong: NaN/None, above
    :data:`WRONG_ABOVE`, or above :data:`WRONG_FLOOR` and 4x the best-agreeing config's
    disagreement (configs compute the same math, so one that stands out is broken; a rounding
    difference to vLLM shared by every config is not)."""
    fam = _family(kernel)
    finite = [e for e in errors.values() if e is not None and math.isfinite(e)]
    best = min(finite, default=0.0)
    wrong = set()
    for name, err in errors.items():
        broken = err is None or not math.isfinite(err) or err > WRONG_ABOVE[fam]
        if broken or (err > WRONG_FLOOR[fam] and err > 4 * best):
            wrong.add(name)
    return wrong


def geomean(values: Iterable[float]) -> float | None:
    vals = list(values)
    return math.exp(sum(map(math.log, vals)) / len(vals)) if vals else None


def picked_name(kernel: str, num_tokens: int, hidden: int) -> str:
    """The :mod:`hlcore.aux_configs` name the current pick rule gives ``kernel`` at this size."""
    import json

    from hlcore import aux_configs

    picked = getattr(aux_configs, f"pick_{kernel}_config")(num_tokens, hidden)
    for name, cfg in aux_configs.ALL_CONFIGS[kernel].items():
        if cfg == picked:
            return name
    return json.dumps(picked, sort_keys=True)


def case_timings(
    records: Iterable[Mapping[str, Any]],
) -> dict[str, dict[Case, dict[str, Any]]]:
    """kernel -> (num_tokens, hidden) -> ``{"configs": {name: us}, "vllm_us": us | None,
    "excluded": {name: why}}`` (valid Helion timings only in ``configs``)."""
    out: dict[str, dict[Case, dict[str, Any]]] = {}
    for r in records:
        case = out.setdefault(r["kernel"], {}).setdefault(
            (int(r["num_tokens"]), int(r["hidden"])), {"configs": {}, "vllm_us": None, "excluded": {}}
        )
        us = r.get("median_us")
        if r.get("provider") == "vllm":
            if us is not None and not r.get("error"):
                case["vllm_us"] = float(us)
            continue
        name = r.get("config")
        if r.get("error"):
            case["excluded"][name] = f"error: {r['error']}"
        elif r.get("wrong"):
            case["excluded"][name] = f"wrong (vs vLLM {r.get('vs_vllm')})"
        elif us is None or not us > 0:
            case["excluded"][name] = "not timed"
        else:
            case["configs"][name] = float(us)
    return out


def subset_loss(
    cases: Mapping[Case, Mapping[str, float]], subset: Sequence[str]
) -> tuple[float, float | None, list[Case]]:
    """(max, geomean) over ``cases`` of (best time within ``subset``) / (best time overall); cases
    where no config of the subset has a valid time count as inf and are listed."""
    losses, uncovered = [], []
    for case, times in cases.items():
        if not times:
            continue
        mine = [times[c] for c in subset if c in times]
        if not mine:
            uncovered.append(case)
            continue
        losses.append(min(mine) / min(times.values()))
    if uncovered:
        return math.inf, geomean(losses), uncovered
    return max(losses, default=1.0), geomean(losses), uncovered


def derive_set(
    cases: Mapping[Case, Mapping[str, float]],
    tolerance: float = TOLERANCE,
    *,
    exhaustive_max: int = 12,
) -> dict[str, Any]:
    """The smallest subset of the timed configs whose per-case best is within ``tolerance`` of the
    overall best on every case (ties: smaller geomean loss, then names). Exhaustive over subsets
    for up to ``exhaustive_max`` configs, else greedy (add the config that lowers (max, geomean)
    loss most). ``by_size``: the best subset of each size and its losses."""
    names = sorted({c for times in cases.values() for c in times})
    limit = 1 + tolerance

    def key(subset: Sequence[str]):
        mx, gm, unc = subset_loss(cases, subset)
        return (len(unc), mx, gm if gm is not None else math.inf, tuple(subset))

    by_size: list[dict[str, Any]] = []
    if len(names) <= exhaustive_max:
        for k in range(1, len(names) + 1):
            best = min((list(s) for s in itertools.combinations(names, k)), key=key)
            by_size.append(_size_row(cases, best))
    else:
        chosen: list[str] = []
        while len(chosen) < len(names):
            chosen = min(([*chosen, c] for c in names if c not in chosen), key=key)
            by_size.append(_size_row(cases, chosen))
    reached = next((row for row in by_size if row["max_loss"] <= limit), None)
    pick = reached or (by_size[-1] if by_size else {"configs": [], "max_loss": None, "geomean_loss": None})
    return {
        "tolerance": tolerance,
        "method": "exhaustive" if len(names) <= exhaustive_max else "greedy",
        "configs": pick["configs"],
        "max_loss": pick["max_loss"],
        "geomean_loss": pick["geomean_loss"],
        "reached": reached is not None,
        "by_size": by_size,
    }


def _size_row(cases, subset):
    mx, gm, unc = subset_loss(cases, subset)
    return {
        "configs": list(subset),
        "max_loss": mx,
        "geomean_loss": gm,
        "uncovered": [list(c) for c in unc],
    }


def _ranges(values: Sequence[int]) -> list[int]:
    return [min(values), max(values)]


def rule_table(choice: Mapping[Case, str]) -> list[dict[str, Any]]:
    """Compress ``(num_tokens, hidden) -> config`` into rows ``{"num_tokens": [lo, hi], "hidden":
    [lo, hi], "config": name}`` over the measured points: per num_tokens, runs of consecutive
    measured hidden sizes with one config; then consecutive num_tokens whose runs are identical
    are merged. Ranges are inclusive and name measured values only (what lies between two
    measured points is the reader's interpolation)."""
    tokens = sorted({m for m, _ in choice})
    hiddens = sorted({h for _, h in choice})
    per_tokens: list[tuple[int, tuple]] = []
    for m in tokens:
        runs: list[tuple[int, int, str]] = []
        for h in hiddens:
            name = choice.get((m, h))
            if name is None:
                continue
            if runs and runs[-1][2] == name and _next_measured(hiddens, runs[-1][1], m, choice) == h:
                runs[-1] = (runs[-1][0], h, name)
            else:
                runs.append((h, h, name))
        per_tokens.append((m, tuple(runs)))
    rows: list[dict[str, Any]] = []
    groups: list[tuple[list[int], tuple]] = []
    for m, runs in per_tokens:
        if groups and groups[-1][1] == runs:
            groups[-1][0].append(m)
        else:
            groups.append(([m], runs))
    for ms, runs in groups:
        for lo, hi, name in runs:
            rows.append({"num_tokens": _ranges(ms), "hidden": [lo, hi], "config": name})
    return rows


def _next_measured(hiddens: Sequence[int], h: int, m: int, choice: Mapping[Case, str]) -> int | None:
    later = [x for x in hiddens if x > h]
    return later[0] if later and (m, later[0]) in choice else None


def analyze_kernel(
    kernel: str,
    cases: Mapping[Case, Mapping[str, Any]],
    *,
    pick: Callable[[str, int, int], str] = picked_name,
    tolerance: float = TOLERANCE,
) -> dict[str, Any]:
    """Everything :func:`analyze` reports for one kernel (``cases`` from :func:`case_timings`)."""
    rows, ratios, sp_picked, sp_best = [], [], [], []
    best_counts: dict[str, int] = {}
    picked_is_best, picked_missing = 0, []
    valid = {case: c["configs"] for case, c in cases.items() if c["configs"]}
    for (m, h), c in sorted(cases.items()):
        times, vllm_us = c["configs"], c["vllm_us"]
        try:
            picked = pick(kernel, m, h)
        except Exception as exc:  # noqa: BLE001 - a pick rule that raises is reported, not fatal
            picked = f"pick failed: {exc}"
        row: dict[str, Any] = {
            "num_tokens": m,
            "hidden": h,
            "picked": picked,
            "vllm_us": vllm_us,
            "excluded": dict(c["excluded"]),
            "times_us": dict(sorted(times.items(), key=lambda kv: kv[1])),
        }
        if times:
            best = min(times, key=times.get)
            row.update(best=best, best_us=times[best])
            best_counts[best] = best_counts.get(best, 0) + 1
            if vllm_us:
                row["best_vs_vllm"] = vllm_us / times[best]
                sp_best.append(row["best_vs_vllm"])
            if picked in times:
                ratio = times[picked] / times[best]
                row.update(picked_us=times[picked], picked_over_best=ratio)
                ratios.append((ratio, m, h))
                picked_is_best += picked == best
                if vllm_us:
                    row["picked_vs_vllm"] = vllm_us / times[picked]
                    sp_picked.append(row["picked_vs_vllm"])
            else:
                picked_missing.append([m, h, c["excluded"].get(picked, "not timed")])
        rows.append(row)
    derived = derive_set(valid, tolerance)
    choice = {
        case: min((n for n in derived["configs"] if n in times), key=times.get)
        for case, times in valid.items()
        if any(n in times for n in derived["configs"])
    }
    worst = max(ratios, key=lambda t: t[0], default=None)  # first (smallest) case on ties
    return {
        "cases": rows,
        "num_cases": len(rows),
        "picked_vs_best": {
            "geomean": geomean(r for r, _, _ in ratios),
            "max": worst[0] if worst else None,
            "max_at": {"num_tokens": worst[1], "hidden": worst[2]} if worst else None,
            "picked_is_best": picked_is_best,
            "compared": len(ratios),
            "within_tolerance": sum(r <= 1 + tolerance for r, _, _ in ratios),
            "picked_wrong_or_missing": picked_missing,
        },
        "best_counts": dict(sorted(best_counts.items(), key=lambda kv: -kv[1])),
        "wrong_or_failed": sorted(
            {f"{name}: {why}" for c in cases.values() for name, why in c["excluded"].items()}
        ),
        "speedup_vs_vllm": {
            "picked_geomean": geomean(sp_picked),
            "picked_min": min(sp_picked, default=None),
            "best_geomean": geomean(sp_best),
            "picked_slower_than_vllm": sum(s < 1 for s in sp_picked),
        },
        "derived_set": derived,
        "rule": rule_table(choice),
    }


def analyze(
    records: Iterable[Mapping[str, Any]],
    *,
    pick: Callable[[str, int, int], str] = picked_name,
    tolerance: float = TOLERANCE,
) -> dict[str, dict[str, Any]]:
    """kernel -> :func:`analyze_kernel` for every kernel in the timing records."""
    return {
        kernel: analyze_kernel(kernel, cases, pick=pick, tolerance=tolerance)
        for kernel, cases in case_timings(records).items()
    }


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None or not math.isfinite(value) else format(value, spec)


def summary_lines(analysis: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Each kernel's rule, then a short text table (last): per kernel, picked/best (geomean, max,
    where), how often the pick is best, speedup vs vLLM (picked, best), the derived set and its loss."""
    table = [
        f"{'kernel':26s} {'cases':>5s} {'pick/best':>9s} {'max':>6s} {'at (M,H)':>12s} {'pick=best':>9s} "
        f"{'vs vLLM pick':>12s} {'best':>6s}  derived set (max loss)"
    ]
    for kernel, a in analysis.items():
        p, s, d = a["picked_vs_best"], a["speedup_vs_vllm"], a["derived_set"]
        at = f"{p['max_at']['num_tokens']},{p['max_at']['hidden']}" if p["max_at"] else "-"
        table.append(
            f"{kernel:26s} {a['num_cases']:5d} {_fmt(p['geomean'], '8.3f')}x {_fmt(p['max'], '5.2f')}x "
            f"{at:>12s} {p['picked_is_best']:4d}/{p['compared']:<4d} {_fmt(s['picked_geomean'], '11.2f')}x "
            f"{_fmt(s['best_geomean'], '5.2f')}x  {', '.join(d['configs'])} ({_fmt(d['max_loss'], '.3f')}"
            f"{'' if d['reached'] else ', tolerance not reached'})"
        )
    rules: list[str] = []
    for kernel, a in analysis.items():
        rules.append(f"rule {kernel} (derived set's best per measured size):")
        for row in a["rule"]:
            rules.append(
                f"  num_tokens {row['num_tokens'][0]}..{row['num_tokens'][1]}  "
                f"hidden {row['hidden'][0]}..{row['hidden'][1]}  -> {row['config']}"
            )
        if a["wrong_or_failed"]:
            rules.append(
                f"  excluded: {len(a['wrong_or_failed'])} (config: why), e.g. {a['wrong_or_failed'][0]}"
            )
    return rules + table
