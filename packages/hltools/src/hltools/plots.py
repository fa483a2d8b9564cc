"""PNG plots of the benchmark results (matplotlib, Agg backend, imported only when plotting).

* :func:`plot_kernel_speedups`: one PNG per format, the distribution of Helion's per-shape speedup
  over vLLM's default kernel (baseline µs / Helion µs; > 1 = Helion faster): a box per (model,
  layer) over the num_tokens values, every point drawn (coloured by M), the geomean as a line.
* :func:`plot_e2e`: output tokens/s with and without the plugin (its defaults: Helion GEMMs only) vs
  concurrency, and their ratio (a series more per extra setting with runs: ``gemm``, Helion GEMMs
  only, ``HL_AUX_KERNELS=none``; ``aux``, Helion GEMMs and aux kernels, ``HL_AUX_KERNELS=all``;
  ``fused``, the aux kernels fused with the fp8 quant, ``HL_AUX_FUSION=1``).

Every plot carries GPU, versions and commit in its title. ``PlotsUnavailable`` is raised when
matplotlib is not installed (the GPU machine runs without it: ``hltools bench report DIR`` redraws
from the JSON elsewhere).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hltools.kernel_results import BenchResult, speedups
from hltools.results import PROVENANCE_FIELDS, geomean

#: Per extra e2e setting (:data:`hltools.e2e.EXTRA_SETTINGS`): tokens/s and ratio style (marker,
#: colour), per-token latency ratio style. Settings not listed get matplotlib's next colours.
E2E_STYLES = {
    "gemm": ("D-", "darkorange", "v--", "olive"),
    "aux": ("s-", "teal", "^--", "slategray"),
    "fused": ("P-", "purple", "x--", "saddlebrown"),
}


class PlotsUnavailable(RuntimeError):
    """matplotlib cannot be imported."""


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotsUnavailable(
            f"matplotlib is not installed ({exc}); run `hltools bench report DIR` where it is"
        ) from None
    return plt


def provenance_line(meta: Mapping[str, Any]) -> str:
    """``GPU · torch x · triton y · helion z · vllm w · commit abcdef12 · date`` from the fields present."""
    parts = [str(meta["gpu"])] if meta.get("gpu") else []
    parts += [f"{d} {meta[d]}" for d in ("torch", "triton", "helion", "vllm") if meta.get(d)]
    if meta.get("commit"):
        parts.append(f"commit {str(meta['commit'])[:10]}")
    if meta.get("date"):
        parts.append(str(meta["date"])[:10])
    return " · ".join(parts)


def _meta_of(results: Sequence[BenchResult], meta: Mapping[str, Any] | None) -> dict[str, Any]:
    out = dict(meta or {})
    if results:
        r = results[0]
        for key in PROVENANCE_FIELDS:
            out.setdefault(key, getattr(r, key))
    return out


def plot_kernel_speedups(
    results: Sequence[BenchResult],
    output: Path,
    *,
    baseline: str = "vllm",
    metadata: Mapping[str, Any] | None = None,
) -> list[Path]:
    """Write ``output/kernels-<format>.png`` for each format with at least one speedup; return the paths."""
    plt = _pyplot()
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    meta = _meta_of(results, metadata)
    points = speedups(results, baseline)
    paths = []
    for fmt in dict.fromkeys(p.format for p in points):
        pts = [p for p in points if p.format == fmt]
        models = list(dict.fromkeys(p.model for p in pts))
        groups = list(dict.fromkeys((p.model, p.layer, p.n, p.k) for p in pts))
        labels = [
            (f"{model}\n" if len(models) > 1 else "") + f"{layer}\n{n}x{k}" for model, layer, n, k in groups
        ]
        data = [[p.value for p in pts if (p.model, p.layer, p.n, p.k) == g] for g in groups]
        ms = sorted({p.m for p in pts})
        cmap = plt.get_cmap("viridis", max(len(ms), 2))
        fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(groups) + 2), 4.8))
        ax.boxplot(data, positions=range(len(groups)), widths=0.5, showfliers=False)
        for i, g in enumerate(groups):
            gp = [p for p in pts if (p.model, p.layer, p.n, p.k) == g]
            for j, p in enumerate(gp):
                x = i + (j - (len(gp) - 1) / 2) * min(0.06, 0.5 / max(len(gp), 1))
                ax.scatter(x, p.value, s=22, color=cmap(ms.index(p.m)), zorder=3, edgecolors="none")
        g = geomean(p.value for p in pts)
        ax.axhline(1.0, color="grey", linestyle=":", linewidth=1)
        if g is not None:
            ax.axhline(g, color="crimson", linewidth=1.5, label=f"geomean {g:.2f}×")
        for m in ms:
            ax.scatter([], [], s=22, color=cmap(ms.index(m)), label=f"M={m}")
        kernels = sorted({_short(p.baseline) for p in pts})
        ax.set_xticks(range(len(groups)), labels, fontsize=8)
        ax.set_ylabel(f"speedup (baseline µs / Helion µs)\nbaseline: {', '.join(kernels)}")
        title = f"{fmt}: Helion scaled_mm vs {'vLLM default' if baseline == 'vllm' else baseline}"
        ax.set_title(title + "\n" + _wrap(provenance_line(meta)), fontsize=8)
        ax.legend(fontsize=7, ncol=2, loc="best")
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        path = output / f"kernels-{fmt}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths


def _short(kernel: str) -> str:
    return kernel.removeprefix("vllm ")


def plot_e2e(rows: Sequence[Mapping[str, Any]], path: Path, *, metadata: Mapping[str, Any]) -> Path:
    """Write one PNG: left, output tokens/s with and without the plugin vs concurrency (log2 axis);
    right, the plugin's speedup (tokens/s ratio) and per-token latency ratio. ``rows``:
    :func:`hltools.e2e.summarize`'s (keys ``concurrency``, ``tokens_per_s_on``, ``tokens_per_s_off``,
    ``speedup``, ``tpot_ms_on``, ``tpot_ms_off``). Rows with values of an extra setting
    (:data:`hltools.e2e.EXTRA_SETTINGS`; ``tokens_per_s_<name>``, ``speedup_<name>``,
    ``tpot_ms_<name>``: ``gemm``, Helion GEMMs only, ``HL_AUX_KERNELS=none``; ``aux``, Helion GEMMs
    and aux kernels, ``HL_AUX_KERNELS=all``; ``fused``, ``HL_AUX_FUSION=1``) add a series for it on
    both sides. A run of one setting alone (``--plugins on``; rows without ratios) draws the left
    panel only: join it with the other setting's run first (``hltools bench merge-e2e``)."""
    from hltools.e2e import EXTRA_SETTINGS

    plt = _pyplot()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = sorted(rows, key=lambda r: r["concurrency"])
    c = [r["concurrency"] for r in rows]
    extras = [
        x for x in EXTRA_SETTINGS.values() if any(r.get(f"tokens_per_s{x.suffix}") is not None for r in rows)
    ]
    small = "small" if extras else None
    ratio_keys = ["speedup"] + [f"speedup{x.suffix}" for x in extras]
    compared = any(r.get(k) is not None for r in rows for k in ratio_keys)
    fig, axes = plt.subplots(1, 2 if compared else 1, figsize=(11 if compared else 6, 4.5), squeeze=False)
    left = axes[0][0]
    series = [("tokens_per_s_off", "vLLM (no plugin)", "o-"), ("tokens_per_s_on", "hlvllm", "s-")]
    for x in extras:
        style = E2E_STYLES.get(x.name, ("*-",))[0]
        series.append((f"tokens_per_s{x.suffix}", f"hlvllm {x.label} ({x.env_text})", style))
    for key, label, style in series:
        left.plot(c, [_nan(r.get(key)) for r in rows], style, label=label)
    left.set_xscale("log", base=2)
    left.set_xticks(c, [str(x) for x in c])
    left.set_xlabel("concurrency (sequences decoded together)")
    left.set_ylabel("output tokens/s")
    left.legend(fontsize=small)
    left.grid(alpha=0.3)
    if compared:
        _draw_e2e_ratios(axes[0][1], rows, c, extras, small)
    what = f"{metadata.get('model', '')} {metadata.get('format', '')}, {metadata.get('layers', '?')} layers"
    fig.suptitle(f"vLLM end to end: {what}\n{_wrap(provenance_line(metadata), 140)}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _draw_e2e_ratios(
    right: Any, rows: Sequence[Mapping[str, Any]], c: list, extras: list, small: str | None
) -> None:
    """plot_e2e's right panel: tokens/s and per-token latency ratios against vLLM vs concurrency."""
    on_label = "tokens/s ratio (hlvllm / vLLM)" if extras else "tokens/s ratio"
    right.plot(c, [_nan(r.get("speedup")) for r in rows], "s-", color="crimson", label=on_label)
    lat = [_ratio(r.get("tpot_ms_off"), r.get("tpot_ms_on")) for r in rows]
    right.plot(c, lat, "^--", color="teal", label="per-token latency ratio (off / on)")
    for x in extras:
        style, color, lat_style, lat_color = E2E_STYLES.get(x.name, ("*-", None, "+--", None))
        right.plot(
            c,
            [_nan(r.get(f"speedup{x.suffix}")) for r in rows],
            style,
            color=color,
            label=f"tokens/s ratio ({x.label} / vLLM)",
        )
        lat = [_ratio(r.get("tpot_ms_off"), r.get(f"tpot_ms{x.suffix}")) for r in rows]
        right.plot(c, lat, lat_style, color=lat_color, label=f"per-token latency ratio (off / {x.name})")
    right.axhline(1.0, color="grey", linestyle=":", linewidth=1)
    right.set_xscale("log", base=2)
    right.set_xticks(c, [str(x) for x in c])
    right.set_xlabel("concurrency")
    right.set_ylabel("plugin / no plugin (> 1 = plugin faster)")
    right.legend(fontsize=small)
    right.grid(alpha=0.3)


def _wrap(text: str, width: int = 80) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width)) if text else ""


def _nan(v: Any) -> float:
    return float("nan") if v is None else float(v)


def _ratio(a: Any, b: Any) -> float:
    return a / b if a and b and math.isfinite(a) and math.isfinite(b) else float("nan")
