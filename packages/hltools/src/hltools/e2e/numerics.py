"""The numerics check of ``hltools bench e2e``: every engine run scores the same fixed token sequences
(teacher-forced logprobs, :func:`hltools.e2e.worker.record_numerics`); :func:`numerics` compares each
setting's logprobs with the no-plugin run's (``off``, round 0) as |Δlogprob| per scored position (max
and mean over all positions of all the setting's runs), and judges the plugin against the ``control``
(vLLM with its second-choice kernel, :data:`hltools.e2e.settings.CONTROL_ENV`) measured the same way:
the plugin fails when its max or mean exceeds :data:`NUMERICS_LIMIT` times the control's.
:func:`numerics_line` says it in one sentence.

Pure Python: runs without the record (older results) give ``None`` and no line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hltools.e2e.settings import EXTRA_SETTINGS, HELION_PLUGINS, PLUGINS

#: The plugin's max and mean |Δlogprob| against vLLM may each be at most this many times the control's.
NUMERICS_LIMIT = 2.0
#: Readable names of the kernels the control runs instead of vLLM's first choice (else the class name).
KERNEL_NAMES = {
    "ChannelWiseTorchFP8ScaledMMLinearKernel": "torch._scaled_mm",
    "TritonInt8ScaledMMLinearKernel": "Triton int8 scaled_mm",
    "CutlassFp8BlockScaledMMKernel": "CUTLASS block fp8",
}


def abs_deltas(logprobs: Sequence[Sequence[float]], reference: Sequence[Sequence[float]]) -> list[float]:
    """|a - b| per scored position of two runs' ``numerics["logprobs"]`` (prompt by prompt, position
    by position); ``ValueError`` when their shapes differ (different sequences were scored)."""
    if len(logprobs) != len(reference) or any(
        len(a) != len(b) for a, b in zip(logprobs, reference, strict=True)
    ):
        raise ValueError("the runs scored different numbers of prompts or positions")
    return [
        abs(a - b)
        for row, ref in zip(logprobs, reference, strict=True)
        for a, b in zip(row, ref, strict=True)
    ]


def _key(record: Mapping[str, Any]) -> tuple:
    """What must match for two runs' logprobs to be comparable: the sequences scored."""
    lengths = record.get("lengths")
    return record.get("prompts"), record.get("tokens"), lengths and tuple(lengths), record.get("seed")


def _kernels(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The linear kernel class names of the runs (rank 0), sorted."""
    return sorted({str(k) for r in runs for k in (r.get("kernels") or {}).values()})


def numerics(by: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, Any] | None:
    """Per setting other than ``off`` (runs grouped by plugin setting, ``by``), the max and mean of
    |Δlogprob| against ``off``'s round-0 run over every scored position of all its runs
    (``settings``: name -> ``{"max", "mean", "positions", "runs"}``), the control's kernels and
    ``off``'s, and the check (:func:`_check`). None without an ``off`` run that holds logprobs; runs
    that scored other sequences (another seed) are left out."""
    ref = next(
        (r for r in sorted(by.get("off", []), key=lambda r: r.get("round", 0)) if r.get("numerics")), None
    )
    if ref is None:
        return None
    rec = ref["numerics"]
    settings: dict[str, dict[str, Any]] = {}
    for p in PLUGINS:
        runs = [
            r for r in by.get(p, []) if p != "off" and r.get("numerics") and _key(r["numerics"]) == _key(rec)
        ]
        if not runs:
            continue
        deltas = [d for r in runs for d in abs_deltas(r["numerics"]["logprobs"], rec["logprobs"])]
        if deltas:
            settings[p] = {
                "max": max(deltas),
                "mean": sum(deltas) / len(deltas),
                "positions": len(deltas),
                "runs": len(runs),
            }
    out = {
        "prompts": rec.get("prompts"),
        "tokens": rec.get("tokens"),
        "lengths": rec.get("lengths"),
        "reference": f"off-r{ref.get('round', 0)}",
        "settings": settings,
        "off_kernels": _kernels([ref]),
        "control_kernels": _kernels(by.get("control", [])) if "control" in settings else [],
        "limit": NUMERICS_LIMIT,
    }
    return {**out, **_check(out)}


def _check(out: Mapping[str, Any]) -> dict[str, Any]:
    """The 2x rule on :func:`numerics`'s ``out``: ``ratios`` (each plugin setting's max and mean over
    the control's), ``ok`` (True / False; None without a usable control or a plugin setting, or when
    a plugin setting's logprobs equal ``off``'s bitwise), ``control_problem`` (why the control cannot
    judge: it did not run, it ran ``off``'s own kernels, or its logprobs equal ``off``'s bitwise; None
    when it can) and ``plugin_problem`` (a plugin setting whose logprobs equal ``off``'s bitwise: no
    scored token went through a Helion kernel, so there was nothing to judge; None otherwise)."""
    settings, control = out["settings"], out["settings"].get("control")
    plugin = [p for p in HELION_PLUGINS if p in settings]
    problem = None
    if control is None:
        problem = "no control ran"
    elif out["control_kernels"] == out["off_kernels"]:
        problem = "the control ran vLLM's own first-choice kernels"
    elif control["max"] == 0:
        problem = "the control's logprobs equal vLLM's bitwise"
    same = [p for p in plugin if settings[p]["max"] == 0]
    plugin_problem = (
        f"{', '.join(_label(p) for p in same)} equal vLLM's logprobs bitwise: no scored token ran a Helion kernel"
        if same
        else None
    )
    if problem or plugin_problem or not plugin:
        return {"ratios": {}, "ok": None, "control_problem": problem, "plugin_problem": plugin_problem}
    ratios = {p: {k: settings[p][k] / control[k] for k in ("max", "mean")} for p in plugin}
    ok = all(r <= out["limit"] for q in ratios.values() for r in q.values())
    return {"ratios": ratios, "ok": ok, "control_problem": None, "plugin_problem": None}


def _label(p: str) -> str:
    return "plugin" if p == "on" else EXTRA_SETTINGS[p].label if p in EXTRA_SETTINGS else p


def _kernel_text(names: Sequence[str]) -> str:
    return ", ".join(KERNEL_NAMES.get(n, n) for n in names) or "kernels not recorded"


def numerics_line(n: Mapping[str, Any]) -> str:
    """One sentence from :func:`numerics`: each setting's max and mean |Δlogprob| against vLLM, the
    control's, the ratios and the verdict (``ok`` or ``**FAIL**``), or why there is none."""
    fmt = "{:.3g}".format
    settings = n["settings"]
    parts = [
        f"{_label(p)} max {fmt(s['max'])} mean {fmt(s['mean'])}"
        for p, s in settings.items()
        if p != "control"
    ]
    if "control" in settings:
        c = settings["control"]
        parts.append(
            f"control ({_kernel_text(n['control_kernels'])}) max {fmt(c['max'])} mean {fmt(c['mean'])}"
        )
    lengths = n.get("lengths")
    scored = (
        f"{n['prompts']} prompts of {min(lengths)}-{max(lengths)} tokens alone, {n['tokens']} scored"
        if lengths
        else f"{n['prompts']} prompts x {n['tokens']} tokens"
    )
    head = f"Numerics vs vLLM ({scored}, teacher-forced logprobs, |Δlogprob| against {n['reference']}): " + (
        "; ".join(parts) or "no other setting scored"
    )
    limit = f"limit {n['limit']:g}x"
    if n.get("control_problem"):
        return f"{head}; {n['control_problem']}: no pass/fail."
    if n.get("plugin_problem"):
        return f"{head}; {n['plugin_problem']}: no pass/fail."
    if not n.get("ratios"):
        return f"{head}; no plugin setting ran: no pass/fail."
    ratios = "; ".join(
        f"{_label(p)}/control {fmt(r['max'])}x max, {fmt(r['mean'])}x mean" for p, r in n["ratios"].items()
    )
    return f"{head}; {ratios} ({limit}): " + ("ok." if n["ok"] else "**FAIL**.")
