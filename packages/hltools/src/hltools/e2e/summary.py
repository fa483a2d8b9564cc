"""The results of ``hltools bench e2e``: the engine runs aggregated per concurrency and plugin setting
(:func:`summarize`), their tables (:func:`throughput_table`, :func:`startup_table`) and the files
``<stem>.json`` / ``.csv`` / ``.md`` (:func:`write_e2e`, through :mod:`hltools.results`).

Pure Python: ``bench report`` and ``bench merge-e2e`` rebuild summaries from saved runs anywhere.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hltools.e2e.numerics import numerics, numerics_line
from hltools.e2e.plan import AGREEMENT_PROMPTS, AGREEMENT_TOKENS
from hltools.e2e.settings import EXTRA_SETTINGS, HELION_PLUGINS, PLUGINS, TIMED_PLUGINS, ExtraSetting
from hltools.results import ResultTable, cell, provenance_text, write_csv, write_json, write_text


def _median(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def helion_ranks(run: Mapping[str, Any]) -> dict[str, Any] | None:
    """Per tensor-parallel rank of a plugin run (:data:`HELION_PLUGINS`: ``on``, ``gemm``, ``aux``,
    ``fused``): did it use a Helion linear kernel (a class name ``Helion...`` in ``kernels_by_rank``)
    and capture sizes into CUDA graphs with Helion (a ``helion`` route in ``captured_by_rank``)?
    ``{"ranks", "kernels", "captured", "active", "inactive"}`` (counts; ``inactive``: rank -> what it
    lacks); older results without ``*_by_rank`` count rank 0 alone. None when the run holds no
    kernel record."""
    kernels = run.get("kernels_by_rank")
    if kernels is None:
        if "kernels" not in run:
            return None
        kernels = [run["kernels"]]
    captured = run.get("captured_by_rank")
    if captured is None:
        captured = [run.get("captured") or {}]
    n = max(len(kernels), len(captured), int(run.get("tensor_parallel_size", 1)))
    counts = {"ranks": n, "kernels": 0, "captured": 0, "active": 0}
    inactive: dict[str, str] = {}
    for rank in range(n):
        k = kernels[rank] if rank < len(kernels) else None
        c = captured[rank] if rank < len(captured) else None
        has_k = any(str(v).startswith("Helion") for v in (k or {}).values())
        has_c = bool((c or {}).get("helion"))
        counts["kernels"] += has_k
        counts["captured"] += has_c
        counts["active"] += has_k and has_c
        lacks = [
            w for w, ok in (("no Helion kernel", has_k), ("no size captured with Helion", has_c)) if not ok
        ]
        if lacks:
            inactive[str(rank)] = ", ".join(lacks)
    return {**counts, "inactive": inactive}


#: Above this spread of a setting's timed repeats (slowest / fastest - 1, %), a row's ratio is noise.
NOISY_SPREAD_PCT = 10.0
#: Above this spread of the one-token generates (TTFT), a repeat stalled (a 20-40 ms TTFT varies by
#: tens of % on a busy host; a JIT compile in a repeat makes it seconds).
STALL_SPREAD_PCT = 200.0


def _spread_pct(samples: Sequence[float]) -> float | None:
    """Slowest over fastest timed ``generate``, minus 1, in % (None without two samples)."""
    samples = [x for x in samples if x and x > 0]
    return 100.0 * (max(samples) / min(samples) - 1.0) if len(samples) > 1 else None


def summarize(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Aggregate worker results: per concurrency, each plugin setting's tokens/s, TPOT and TTFT
    (median over rounds; ``None`` for a setting without runs), the spread of its timed repeats over
    all rounds (``spread_pct_<setting>``: slowest / fastest - 1 of the full-length generates, in %;
    ``ttft_spread_pct_<setting>``: the same of the one-token generates that give TTFT, where a stall
    shows first, e.g. a JIT compile) and the ratios to ``off`` (``speedup``,
    ``tpot_speedup``: ``on``; ``speedup_<name>``, ``tpot_speedup_<name>``: each extra setting,
    ``gemm``, ``aux``, ``fused``); start-up times (cold = round 0, warm = median of later rounds) and their
    deltas to ``off`` (``delta_*``: ``on``; ``delta_<name>_*``, with that setting's runs only); greedy
    agreement of the plugin's runs with the no-plugin run of round 0; ``restart_agreement``: greedy
    agreement of each warm run (round > 0) with its own setting's cold run (round 0), ``None`` with
    one round (vLLM's kernels repeat bitwise; Helion GEMMs whose config splits K add their partial sums
    with atomics in no fixed order, so they repeat bitwise only with ``HL_DETERMINISTIC=1``); the
    tensor-parallel size; per
    plugin run (``on``, ``gemm``, ``aux``, ``fused``), in how many ranks Helion was active
    (:func:`helion_ranks`); the settings present (``plugins``, in :data:`PLUGINS` order); the numerics
    check (``numerics``: :func:`hltools.e2e.numerics.numerics`, None for runs without logprobs). The
    untimed ``control`` runs count for ``numerics``, ``startup`` and ``plugins`` only."""
    by: dict[str, list[Mapping[str, Any]]] = {}
    for r in runs:
        by.setdefault(r["plugin"], []).append(r)
    concurrency = sorted({int(c) for r in runs for c in r.get("throughput", {})})
    agreement, restart = _agreement(by)
    sizes = sorted({int(r.get("tensor_parallel_size", 1)) for r in runs}) or [1]
    helion = {}
    for p in HELION_PLUGINS:
        for r in by.get(p, []):
            ranks = helion_ranks(r)
            if ranks is not None:
                helion[f"{p}-r{r.get('round')}"] = ranks
    return {
        "rows": [_row(c, by) for c in concurrency],
        "ttft": _ttft(by),
        "startup": _startup(by),
        "greedy_agreement": agreement,
        "restart_agreement": restart or None,
        "tensor_parallel_size": sizes[0] if len(sizes) == 1 else sizes,
        "helion_ranks": helion,
        "plugins": [p for p in PLUGINS if p in by],
        "numerics": numerics(by),
    }


def _row(c: int, by: Mapping[str, list[Mapping[str, Any]]]) -> dict[str, Any]:
    """:func:`summarize`'s row of concurrency ``c``: each setting's medians and spreads, the ratios."""
    row: dict[str, Any] = {"concurrency": c}
    for p in TIMED_PLUGINS:
        pts = [r["throughput"][str(c)] for r in by.get(p, []) if str(c) in r.get("throughput", {})]
        row[f"tokens_per_s_{p}"] = _median([t["tokens_per_s"] for t in pts])
        row[f"tpot_ms_{p}"] = _median([t["tpot_ms"] for t in pts])
        row[f"ttft_ms_{p}"] = _median([t["ttft_ms"] for t in pts])
        row[f"spread_pct_{p}"] = _spread_pct([x for t in pts for x in t.get("samples_full_s") or ()])
        row[f"ttft_spread_pct_{p}"] = _spread_pct([x for t in pts for x in t.get("samples_one_s") or ()])
    off, loff = row["tokens_per_s_off"], row["tpot_ms_off"]
    for p, suffix in (("on", ""), *((x.name, x.suffix) for x in EXTRA_SETTINGS.values())):
        tps, lat = row[f"tokens_per_s_{p}"], row[f"tpot_ms_{p}"]
        row[f"speedup{suffix}"] = tps / off if tps and off else None
        row[f"tpot_speedup{suffix}"] = loff / lat if lat and loff else None
    return row


def _ttft(by: Mapping[str, list[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Per prompt length measured alone (``ttft`` of the runs): each setting's median TTFT over all
    its one-token generates (every round), their 20th-80th percentile range, the sample count, and
    ``on`` over ``off`` (``ratio``; > 1: the plugin's first token comes later)."""
    lengths = sorted({int(n) for rs in by.values() for r in rs for n in (r.get("ttft") or {})})
    rows = []
    for n in lengths:
        row: dict[str, Any] = {"input_len": n}
        for p in TIMED_PLUGINS:
            samples = sorted(
                x for r in by.get(p, []) for x in (r.get("ttft") or {}).get(str(n), {}).get("samples_ms", ())
            )
            if not samples:
                continue
            row[f"ttft_ms_{p}"] = statistics.median(samples)
            q = statistics.quantiles(samples, n=5) if len(samples) >= 2 else [samples[0]] * 4
            row[f"ttft_p20_ms_{p}"], row[f"ttft_p80_ms_{p}"] = q[0], q[3]
            row[f"samples_{p}"] = len(samples)
        off, on = row.get("ttft_ms_off"), row.get("ttft_ms_on")
        row["ratio"] = on / off if on and off else None
        rows.append(row)
    return rows


def ttft_table(summary: Mapping[str, Any]) -> ResultTable | None:
    """TTFT of one sequence alone per prompt length: off and on (median, p20-p80), on / off."""
    rows = summary.get("ttft") or []
    if not rows:
        return None

    def med(r, p):
        if r.get(f"ttft_ms_{p}") is None:
            return "-"
        return f"{r[f'ttft_ms_{p}']:.2f} ({r[f'ttft_p20_ms_{p}']:.2f}-{r[f'ttft_p80_ms_{p}']:.2f}, n={r[f'samples_{p}']})"

    return ResultTable(
        "TTFT of one sequence alone, ms: median (p20-p80, samples)",
        ["prompt tokens", "vLLM", "hlvllm", "hlvllm / vLLM"],
        [[str(r["input_len"]), med(r, "off"), med(r, "on"), cell(r.get("ratio"), ".3f")] for r in rows],
    )


def _startup(by: Mapping[str, list[Mapping[str, Any]]]) -> dict[str, Any]:
    """Start-up times per setting (cold: round 0, warm: median of the later rounds), deltas to off."""
    startup: dict[str, Any] = {}
    for p, rs in by.items():
        cold = [r["startup_s"] for r in rs if r.get("round") == 0]
        warm = [r["startup_s"] for r in rs if r.get("round", 0) > 0]
        startup[p] = {"cold_s": cold[0] if cold else None, "warm_s": _median(warm)}
    for p, prefix in (("on", "delta_"), *((x.name, f"delta_{x.name}_") for x in EXTRA_SETTINGS.values())):
        if p != "on" and p not in by:
            continue  # summaries without this extra setting's runs keep the older keys
        for kind in ("cold_s", "warm_s"):
            a, b = startup.get(p, {}).get(kind), startup.get("off", {}).get(kind)
            startup[f"{prefix}{kind}"] = a - b if a is not None and b is not None else None
    return startup


def _agreement(by: Mapping[str, list[Mapping[str, Any]]]) -> tuple[dict | None, dict]:
    """Greedy agreement of the plugin's runs with off's cold run, and of warm runs with their cold one."""

    def cold(p):  # the setting's round-0 run with greedy tokens
        return next((r for r in by.get(p, []) if r.get("round") == 0 and r.get("greedy")), None)

    def agree(r, ref):  # "same/total" prompts with identical greedy tokens
        same = sum(a == b for a, b in zip(r["greedy"], ref["greedy"], strict=False))
        return f"{same}/{len(ref['greedy'])}"

    agreement = None
    ref = cold("off")
    if ref:
        agreement = {
            f"{p}-r{r.get('round')}": agree(r, ref)
            for p in HELION_PLUGINS
            for r in by.get(p, [])
            if r.get("greedy")
        }
    restart = {
        f"{p}-r{r.get('round')}": agree(r, cold(p))
        for p, rs in by.items()
        for r in rs
        if cold(p) and r.get("round", 0) > 0 and r.get("greedy")
    }
    return agreement, restart


def has_setting(summary: Mapping[str, Any], name: str) -> bool:
    """Whether a :func:`summarize` result holds runs of plugin setting ``name``; summaries without a
    ``plugins`` list (older files) are judged by their rows."""
    if "plugins" in summary:
        return name in summary["plugins"]
    return any(r.get(f"tokens_per_s_{name}") is not None for r in summary.get("rows", []))


def has_gemm(summary: Mapping[str, Any]) -> bool:
    """Whether a :func:`summarize` result holds ``gemm`` runs (Helion GEMMs only)."""
    return has_setting(summary, "gemm")


def extra_settings(summary: Mapping[str, Any]) -> list[ExtraSetting]:
    """The :data:`EXTRA_SETTINGS` with runs in ``summary`` (:func:`has_setting`), in column order."""
    return [x for x in EXTRA_SETTINGS.values() if has_setting(summary, x.name)]


SUMMARY_FIELDS = (
    "concurrency",
    "tokens_per_s_off",
    "tokens_per_s_on",
    "speedup",
    "tpot_ms_off",
    "tpot_ms_on",
    "tpot_speedup",
    "ttft_ms_off",
    "ttft_ms_on",
    # per extra setting (``gemm``: Helion GEMMs only, HL_AUX_KERNELS=none; ``aux``: Helion GEMMs and
    # aux kernels, HL_AUX_KERNELS=all; then ``fused``: HL_AUX_FUSION=1), empty without its runs
    *(
        f"{key}_{x.name}"
        for x in EXTRA_SETTINGS.values()
        for key in ("tokens_per_s", "speedup", "tpot_ms", "tpot_speedup", "ttft_ms")
    ),
    "spread_pct_off",
    "spread_pct_on",
    "ttft_spread_pct_off",
    "ttft_spread_pct_on",
)


def write_e2e(
    output: Path, stem: str, metadata: Mapping[str, Any], runs: Sequence[Mapping[str, Any]]
) -> dict:
    """``output/<stem>.json`` (metadata, summary, raw runs), ``<stem>.csv`` (one row per concurrency,
    :data:`SUMMARY_FIELDS`) and ``<stem>.md`` (:func:`summary_markdown`); returns ``{"json": path,
    "csv": path, "md": path, "summary": ...}``."""
    summary = summarize(runs)
    paths = {"json": Path(output) / f"{stem}.json", "csv": Path(output) / f"{stem}.csv"}
    write_json(paths["json"], {"metadata": dict(metadata), "summary": summary, "runs": list(runs)})
    write_csv(paths["csv"], summary["rows"], SUMMARY_FIELDS)
    paths["md"] = write_markdown(output, stem, metadata, summary)
    return {**paths, "summary": summary}


def write_markdown(output: Path, stem: str, metadata: Mapping[str, Any], summary: Mapping[str, Any]) -> Path:
    """``output/<stem>.md``: :func:`summary_markdown`."""
    path = Path(output) / f"{stem}.md"
    write_text(path, summary_markdown(metadata, summary))
    return path


def throughput_table(summary: Mapping[str, Any], title: str = "", *, ttft: bool = False) -> ResultTable:
    """One row per concurrency of a :func:`summarize` result: tokens/s, speedup over vLLM and TPOT
    (``ttft``: and TTFT) of ``off`` and ``on``, then of each extra setting with runs (``gemm``: Helion
    GEMMs only, ``HL_AUX_KERNELS=none``; ``aux``: Helion GEMMs and aux kernels, ``HL_AUX_KERNELS=all``;
    ``fused``: ``HL_AUX_FUSION=1``), headed by its label ("GEMM only", "GEMM+aux", "fused aux")."""
    extras = extra_settings(summary)
    cols = ["concurrency", "tok/s vLLM", "tok/s hlvllm", "speedup", "TPOT ms vLLM", "TPOT ms hlvllm"]
    cols += ["TTFT ms vLLM", "TTFT ms hlvllm"] if ttft else []
    for x in extras:
        cols += [f"tok/s {x.label}", f"speedup {x.label}", f"TPOT ms {x.label}"]
        cols += [f"TTFT ms {x.label}"] if ttft else []
    rows = []
    for r in summary["rows"]:
        cells = [str(r["concurrency"]), cell(r["tokens_per_s_off"], ".0f"), cell(r["tokens_per_s_on"], ".0f")]
        cells += [cell(r["speedup"], ".3f"), cell(r["tpot_ms_off"], ".2f"), cell(r["tpot_ms_on"], ".2f")]
        cells += [cell(r["ttft_ms_off"], ".1f"), cell(r["ttft_ms_on"], ".1f")] if ttft else []
        for x in extras:
            n = x.suffix
            cells += [cell(r.get("tokens_per_s" + n), ".0f"), cell(r.get("speedup" + n), ".3f")]
            cells += [cell(r.get("tpot_ms" + n), ".2f")]
            cells += [cell(r.get("ttft_ms" + n), ".1f")] if ttft else []
        rows.append(cells)
    return ResultTable(title, cols, rows)


def startup_table(summary: Mapping[str, Any]) -> ResultTable:
    """Start-up times with cold and warm caches per setting, and their deltas to ``off``."""
    extras, s = extra_settings(summary), summary["startup"]
    cols = ["start-up", "vLLM s", "hlvllm s", "delta s"]
    cols += [c for x in extras for c in (f"{x.label} s", f"delta {x.label} s")]
    rows = []
    for kind, label in (("cold_s", "cold caches"), ("warm_s", "warm caches")):
        off, on = s.get("off", {}).get(kind), s.get("on", {}).get(kind)
        cells = [label, cell(off, ".1f"), cell(on, ".1f"), cell(s.get("delta_" + kind), "+.1f")]
        for x in extras:
            cells += [cell(s.get(x.name, {}).get(kind), ".1f"), cell(s.get(f"delta_{x.name}_{kind}"), "+.1f")]
        rows.append(cells)
    return ResultTable("", cols, rows, left=("start-up",))  # its first column says "start-up"


def summary_parts(summary: Mapping[str, Any], title: str = "") -> list[ResultTable | str]:
    """What an e2e result shows, in order, the same in its markdown (:func:`summary_markdown`) and on
    the terminal (``bench e2e``, ``bench report``): a legend when an extra setting ran, the throughput
    table (``title``; with TTFT), the repeats' spread, TTFT alone per prompt length, start-up, the
    numerics check (:func:`numerics_lines`; results without logprobs: greedy agreement with the
    no-plugin run) and the agreement of warm restarts, Helion per rank. With runs of an extra
    setting (:func:`extra_settings`: ``gemm``, ``aux``, ``fused``), columns for it (headed by its
    label, "GEMM only", "GEMM+aux", "fused aux") follow the ``off``/``on`` ones."""
    extras = extra_settings(summary)
    parts: list[ResultTable | str] = []
    if extras:
        legend = [
            "vLLM: no plugin",
            "hlvllm: the plugin's defaults (Helion GEMMs; vLLM's norm/activation/quant layers)",
            *(f"{x.label}: {x.about}" for x in extras),
        ]
        parts.append(" · ".join(legend) + ". Speedups are tokens/s over vLLM's.")
    parts.append(throughput_table(summary, title, ttft=True))
    if spread := spread_text(summary["rows"], extras):
        parts.append(spread)
    if (ttft := ttft_table(summary)) is not None:
        parts.append(ttft)
    parts.append(startup_table(summary))
    parts += numerics_lines(summary)
    if summary.get("helion_ranks"):
        parts.append(helion_line(summary["helion_ranks"]))
    return parts


def numerics_lines(summary: Mapping[str, Any]) -> list[str]:
    """The numerics check (:func:`hltools.e2e.numerics.numerics_line`: |Δlogprob| of each setting and
    of the control against vLLM, the 2x verdict) and the greedy agreement of each warm restart with
    its setting's cold run. Results without logprobs (older files) show the greedy agreement of the
    plugin's runs with the no-plugin run in its place, as they always did (each line only when there
    is something to compare)."""
    lines = []
    if summary.get("numerics"):
        lines.append(numerics_line(summary["numerics"]))
    elif summary.get("greedy_agreement"):
        agree = ", ".join(f"{k}: {v}" for k, v in summary["greedy_agreement"].items())
        lines.append(
            f"Greedy agreement with the no-plugin run ({AGREEMENT_PROMPTS} prompts x {AGREEMENT_TOKENS} "
            f"tokens): {agree}."
        )
    if summary.get("restart_agreement"):
        agree = ", ".join(f"{k}: {v}" for k, v in summary["restart_agreement"].items())
        lines.append(f"Greedy agreement of each warm restart with its setting's cold run: {agree}.")
    return lines


def summary_markdown(metadata: Mapping[str, Any], summary: Mapping[str, Any]) -> str:
    """The e2e summary as markdown: a heading, the provenance, then :func:`summary_parts` (a table
    with a title gets that title as a line of its own)."""
    tp = metadata.get("tensor_parallel_size") or summary.get("tensor_parallel_size", 1)
    lines = [
        f"# vLLM end to end: {metadata.get('model')} {metadata.get('format')}, {metadata.get('layers')} "
        f"layers, TP {tp}",
        "",
        provenance_text(metadata),
    ]
    for part in summary_parts(summary):
        if isinstance(part, str):
            lines += ["", part]
        else:
            lines += ["", *([f"{part.title}:", ""] if part.title else []), *part.markdown()]
    return "\n".join(lines) + "\n"


def spread_text(rows: Sequence[Mapping[str, Any]], extras: Sequence[ExtraSetting]) -> str:
    """The spread of each setting's timed repeats per concurrency (and of its one-token generates),
    the rows where it makes a speedup noise and the stalls; empty without spreads."""
    settings = [("off", "vLLM"), ("on", "hlvllm"), *((x.name, x.label) for x in extras)]
    settings = [
        (p, label) for p, label in settings if any(r.get(f"spread_pct_{p}") is not None for r in rows)
    ]
    if not settings:
        return ""
    per = _per_setting(rows, "spread_pct", settings)
    noisy = [
        f"{label} at concurrency {', '.join(map(str, cs))}"
        for p, label in settings
        if (cs := _rows_over(rows, f"spread_pct_{p}", NOISY_SPREAD_PCT))
    ]
    line = f"Spread of the timed repeats (slowest / fastest - 1, %, per concurrency as above): {per}."
    if noisy:
        line += (
            f" **Noisy (> {NOISY_SPREAD_PCT:.0f} %): {'; '.join(noisy)}: a speedup there is noise** "
            "(vLLM's spread counts for every speedup of its row)."
        )
    ttft = [
        (p, label) for p, label in settings if any(r.get(f"ttft_spread_pct_{p}") is not None for r in rows)
    ]
    if ttft:
        stalled = any(_rows_over(rows, f"ttft_spread_pct_{p}", STALL_SPREAD_PCT) for p, _ in ttft)
        line += f" Of the one-token generates (TTFT): {_per_setting(rows, 'ttft_spread_pct', ttft)}" + (
            f". A TTFT spread over {STALL_SPREAD_PCT:.0f} % is a stall (e.g. a JIT compile in a repeat): "
            "that TTFT and the TPOT derived from it are not a result."
            if stalled
            else "."
        )
    return line


def _per_setting(rows, key: str, settings) -> str:
    """``label v1 / v2 / ...; label ...``: each setting's ``<key>_<setting>`` per row, as a whole %."""
    return "; ".join(
        f"{label} " + " / ".join(cell(r.get(f"{key}_{p}"), ".0f") for r in rows) for p, label in settings
    )


def _rows_over(rows, key: str, limit: float) -> list[int]:
    """The concurrencies whose ``key`` is above ``limit``."""
    return [r["concurrency"] for r in rows if (r.get(key) or 0) > limit]


def helion_line(helion: Mapping[str, Mapping[str, Any]]) -> str:
    """One sentence from ``summarize()["helion_ranks"]``: per plugin run (``on-r0``, ``gemm-r0``,
    ``aux-r0``, ``fused-r0``, ...), in how many ranks Helion was active (a Helion linear kernel and sizes
    captured into CUDA graphs with it), and what the other ranks lack."""
    parts = []
    for name, h in helion.items():
        part = f"{name}: Helion active in {h['active']}/{h['ranks']} ranks"
        if h.get("inactive"):
            part += " (" + "; ".join(f"rank {k}: {v}" for k, v in h["inactive"].items()) + ")"
        parts.append(part)
    return (
        "Helion linear kernels and CUDA-graph sizes captured with Helion, per rank: " + "; ".join(parts) + "."
    )
