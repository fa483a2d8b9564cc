"""``hltools bench aux-configs``: how far the aux kernels' generic configs are from the best per shape
in a saved config sweep (:mod:`hltools.aux_sweep`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hltools import options as opt

Sweep = Annotated[
    Path,
    typer.Argument(
        metavar="SWEEP",
        help="`sweep_aux_configs.json` (or `.json.gz`) written by `lab/scripts/sweep_aux_configs.py` on a GPU.",
    ),
]
Tolerance = Annotated[
    float,
    typer.Option(min=0.0, help="A derived config set may be this much slower than the best (0.05 = 5 %)."),
]


def aux_configs(sweep: Sweep, tolerance: Tolerance = 0.05) -> None:
    """How far the aux kernels' generic configs are from the best per shape (`hltools.aux_sweep`): from a
    saved sweep that timed every config of each kernel's set and vLLM's op over hidden sizes x num_tokens
    (measured on a GPU with `lab/scripts/sweep_aux_configs.py`), re-derive per kernel the smallest set within
    --tolerance of the per-shape best and its rule (num_tokens, hidden) -> config, the picked config's
    slowdown against the best (geomean, max and where) and the speedups over vLLM's op. Needs no GPU.
    Exits 1 when the file cannot be read or holds no timings."""
    from hltools import aux_sweep
    from hltools.results import read_json

    out = opt.console()
    what = "sweep_aux_configs.json"
    try:
        records = read_json(sweep, what).get("results") or []
    except ValueError as exc:
        opt.fail(str(exc))
    except (OSError, AttributeError) as exc:
        opt.fail(f"{sweep}: not a {what} ({exc})", 1)
    if not records:
        opt.fail(f"{sweep}: no timings (its 'results' list is empty)", 1)
    for line in aux_sweep.summary_lines(aux_sweep.analyze(records, tolerance=tolerance)):
        out.print(line, highlight=False, markup=False, soft_wrap=True)
