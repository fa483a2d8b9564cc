"""One result schema and one writer/reader for every hltools result: ``bench kernels``
(:mod:`hltools.kernel_results`), ``bench e2e`` (:mod:`hltools.e2e.summary`), ``bench gap``
(:mod:`hltools.bench_gap`) and ``validate`` (:mod:`hltools.validate`).

Schema: a result file is one JSON object, ``{"metadata": {...}, <rows>: [...], ...}``. ``metadata``
holds the run's provenance (:func:`provenance`: GPU, torch, triton, helion and vLLM versions, commit,
date) and its command; the rows are dataclasses (``to_dict`` / :func:`row_from_dict`) or dicts with a
fixed field order (the CSV columns).

Files (``<stem>.json``, ``<stem>.csv``, ``<stem>.md``), all written atomically: JSON with sorted keys,
indent 2 and a trailing newline, NaN written as null (:func:`write_json`); CSV with a header row and
empty cells for None/NaN (:func:`write_csv`). Read back plain or gzipped (``.json.gz``, as results
are committed under lab/results/): :func:`read_json`, :func:`find_result`, :func:`read_rows`.

Tables: :class:`ResultTable` (a title, column names, string cells) is printed with rich and written
as markdown, so the terminal and the files show the same cells. Numbers are formatted by
:func:`cell` (``-`` for a missing value). Plots: :mod:`hltools.plots`.
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import io
import json
import math
import statistics
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hlcore.config_store import write_text_atomic
from hltools.provenance import git_commit, versions

if TYPE_CHECKING:
    from rich.table import Table

#: The provenance fields of a result, in the order they are printed.
PROVENANCE_FIELDS = ("gpu", "torch", "triton", "helion", "vllm", "commit", "date")
VERSION_DISTS = ("torch", "triton", "helion", "vllm")


# --------------------------------------------------------------------------------------------
# Provenance and numbers
# --------------------------------------------------------------------------------------------
def provenance(gpu: str) -> dict[str, str]:
    """The fields every result of one run shares: GPU, versions, commit, date (UTC)."""
    v = versions()
    return {
        "gpu": gpu,
        **{d: v.get(d, "") for d in VERSION_DISTS},
        "commit": git_commit() or "",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def provenance_text(metadata: Mapping[str, Any]) -> str:
    """``gpu X · torch Y · ... · date Z`` of the :data:`PROVENANCE_FIELDS` that ``metadata`` has."""
    return " · ".join(f"{k} {metadata[k]}" for k in PROVENANCE_FIELDS if metadata.get(k))


def cell(value: float | None, spec: str, suffix: str = "") -> str:
    """``value`` formatted with ``spec`` (and ``suffix``); ``-`` when it is None, NaN or infinite."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return format(value, spec) + suffix


def geomean(values: Iterable[float | None]) -> float | None:
    """Geometric mean of the positive finite values (None when there are none)."""
    vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    return statistics.geometric_mean(vals) if vals else None


# --------------------------------------------------------------------------------------------
# Rows
# --------------------------------------------------------------------------------------------
def row_from_dict(cls: type, d: Mapping[str, Any]) -> Any:
    """The dataclass ``cls`` from a JSON row or a CSV row (all strings; empty = None), converting
    strings to the fields' int/float/bool types. Unknown keys are ignored, so older files stay
    readable (and rows of newer ones lose only what this version does not know)."""
    kwargs = {f.name: _coerce(d[f.name], f.type) for f in dataclasses.fields(cls) if f.name in d}
    return cls(**kwargs)


def _coerce(value: Any, annotation: Any) -> Any:
    # "int", "float | None"... (postponed annotations are strings; otherwise the type's name)
    annotation = (
        annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    )
    if not isinstance(value, str) or annotation == "str":
        return value
    if value == "" and "None" in annotation:
        return None
    if annotation.startswith("int"):
        return int(value)
    if annotation.startswith("float"):
        return float(value)
    if annotation == "bool":
        return value.strip().lower() in ("true", "1", "yes")
    return value


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------
def write_json(path: Path, payload: Mapping[str, Any], *, keep_nan: bool = False) -> None:
    """Atomic JSON write: sorted keys, indent 2, trailing newline; NaN and inf written as null
    (``keep_nan``: as ``NaN``/``Infinity``, which Python's json reads back as floats)."""
    data = payload if keep_nan else _nan_to_none(payload)
    write_text_atomic(Path(path), json.dumps(data, indent=2, sort_keys=True, allow_nan=keep_nan) + "\n")


def _nan_to_none(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, Mapping):
        return {k: _nan_to_none(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_nan_to_none(v) for v in x]
    return x


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]], fields: Sequence[str]) -> None:
    """Atomic CSV write with a header row of ``fields`` (other keys left out); None and NaN are
    written as empty cells."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(fields), extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if _nan_to_none(v) is None else v) for k, v in r.items()})
    write_text_atomic(Path(path), buf.getvalue())


def write_text(path: Path, text: str) -> None:
    """Atomic text write (a markdown summary)."""
    write_text_atomic(Path(path), text)


def find_result(path: Path, name: str) -> Path:
    """``path`` itself, ``path/name`` when ``path`` is a directory, or the ``.gz`` beside a missing
    file (results are committed gzipped)."""
    path = Path(path)
    if path.is_dir():
        path = path / name
    if not path.exists() and path.with_name(path.name + ".gz").exists():
        path = path.with_name(path.name + ".gz")
    return path


def read_json(path: Path, what: str = "JSON file") -> Any:
    """The JSON in ``path``, gunzipped first when it ends in ``.gz``. Raises ``FileNotFoundError``
    for a missing file and ``ValueError`` ("<path>: not a <what> (...)") for one that is not
    (gzipped) JSON."""
    raw = Path(path).read_bytes()
    try:
        return _loads(Path(path), raw)
    except (OSError, EOFError, ValueError) as exc:
        raise ValueError(f"{path}: not a {what} ({type(exc).__name__}: {exc})") from None


def _loads(path: Path, raw: bytes) -> Any:
    return json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)


def read_rows(path: Path, cls: type, *, rows_key: str, what: str) -> tuple[dict[str, Any], list[Any]]:
    """``(metadata, rows)`` of a result file: JSON (plain or ``.json.gz``; ``rows_key`` holds the
    rows) or CSV (metadata empty), rows as dataclass ``cls`` (:func:`row_from_dict`). Raises
    ``FileNotFoundError`` for a missing file and ``ValueError`` ("<path>: not a <what> ...") for one
    of another kind."""
    path = Path(path)
    if path.suffix == ".csv":
        with path.open(newline="") as f:
            return {}, [row_from_dict(cls, r) for r in csv.DictReader(f)]
    raw = path.read_bytes()
    try:
        payload = _loads(path, raw)
        return dict(payload.get("metadata", {})), [row_from_dict(cls, r) for r in payload[rows_key]]
    except (OSError, EOFError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path}: not a {what} ({type(exc).__name__}: {exc})") from None


# --------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------
@dataclass
class ResultTable:
    """A table of strings, the same cells printed (:meth:`rich`) and written (:meth:`markdown`).

    ``left``: the columns justified left (the others right, as numbers are); ``fold``: wrap long cells
    in the terminal instead of cutting them. Cells may carry rich markup (``[green]PASS``) when the
    table is only printed."""

    title: str
    columns: list[str]
    rows: list[list[str]]
    left: Collection[str] = ()
    fold: bool = False

    @classmethod
    def of_dicts(
        cls, title: str, rows: Sequence[Mapping[str, str]], *, drop: Collection[str] = (), **kwargs: Any
    ) -> ResultTable:
        """A table of row dicts (the columns: the first row's keys, less ``drop``)."""
        columns = [c for c in rows[0] if c not in drop] if rows else []
        return cls(title, columns, [[r[c] for c in columns] for r in rows], **kwargs)

    def rich(self) -> Table:
        from rich.table import Table

        table = Table(title=self.title)
        for c in self.columns:
            justify = "left" if c in self.left else "right"
            table.add_column(c, justify=justify, overflow="fold" if self.fold else "ellipsis")
        for row in self.rows:
            table.add_row(*row)
        return table

    def markdown(self) -> list[str]:
        """The table as markdown lines (a header, a separator, a line per row); ``(none)`` when the
        table has no columns."""
        if not self.columns:
            return ["(none)"]
        return [
            "| " + " | ".join(self.columns) + " |",
            "|" + " --- |" * len(self.columns),
            *("| " + " | ".join(row) + " |" for row in self.rows),
        ]
