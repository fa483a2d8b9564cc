"""The options the ``hltools`` commands share: one ``Annotated`` alias per option (name, help) and one
parser per kind of value, so every command spells, documents and checks an option the same way.

Lists (``--model a,b``, ``--formats``, ``--num-tokens``) stay strings on the command line, so a
script or a test reads back what was passed; the command parses them with :func:`parse_formats`,
:func:`parse_ints`, :func:`load_models`... Bad input raises ``typer.BadParameter`` naming the option
and what it expects (exit code 2), as does a command that needs a GPU and finds none
(:func:`require_gpu`).

This module imports neither torch nor helion (``--help`` stays fast, ``TRITON_INTERPRET`` can be set
before Triton loads); :attr:`OutDtype.torch_dtype` and :func:`cuda_available` import torch when called.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console

from hltools import model_source
from hltools.format_names import FORMATS, check_formats
from hltools.model_source import ModelSource

if TYPE_CHECKING:
    from rich.progress import Progress

#: Exit code of a command that needs a GPU (or more GPUs than are visible) and has none.
NO_GPU_EXIT = 2
#: vLLM's CUDA-graph decode sizes up to 32 (design §4).
DEFAULT_NUM_TOKENS = "1,2,4,8,16,24,32"
DEFAULT_OUTPUT = Path("bench-results")


def help_markup() -> str | None:
    """The ``rich_markup_mode`` of every ``hltools`` app: typer's rich help (boxes, markdown) when stdout
    is a terminal, click's plain help when it is piped or redirected (``| less``, ``> file``).

    Rich lays options out in four columns and, piped, at 80 columns; the help column is then about 20
    characters wide and long words are cut. Click's plain layout wraps the help under each option at
    80 columns, whole.
    """
    return "markdown" if sys.stdout.isatty() else None


class OutDtype(StrEnum):
    bf16 = "bf16"
    fp16 = "fp16"

    @property
    def torch_dtype(self) -> Any:
        import torch

        return {"bf16": torch.bfloat16, "fp16": torch.float16}[self.value]


# --------------------------------------------------------------------------------------------
# Option types
# --------------------------------------------------------------------------------------------
_MODEL = (
    "A path to a config.json or its folder, an embedded model name (see `hltools validate "
    "--list-models`), or a Hugging Face id: its config.json from the local HF cache, else the embedded "
    "model its base name matches (e.g. RedHatAI/Qwen3-8B-FP8-dynamic -> qwen3-8b). Nothing is "
    "downloaded; a path that does not exist, or lacks a field the shapes need, exits 2 naming it"
)
Model = Annotated[str, typer.Option(help=_MODEL + ".")]
Models = Annotated[str, typer.Option(help=_MODEL + "; several comma-separated.")]
Formats = Annotated[str, typer.Option(help=f"Comma-separated formats: {', '.join(FORMATS)} (or all).")]
ModelFormats = Annotated[
    str | None,
    typer.Option(
        "--formats",
        help=f"Comma-separated formats: {', '.join(FORMATS)} (or all). Default: the model's own format "
        "(its config's quantization_config, or words of its id such as FP8-dynamic), else fp8_dynamic.",
    ),
]
Format = Annotated[str, typer.Option("--format", help=f"One format: {', '.join(FORMATS)}.")]
NumTokens = Annotated[str, typer.Option(help="Comma-separated M values (num_tokens, decode batch sizes).")]
Tp = Annotated[
    int,
    typer.Option(
        min=1,
        help="Tensor-parallel size: N/tp of the column-parallel (qkv, gate_up), K/tp of the "
        "row-parallel layers (o, down).",
    ),
]


def _layer_names(values: list[str] | None) -> list[str] | None:
    """``--layer``'s values as names: comma-separated ones split (:func:`split_names`), each once."""
    return split_names(",".join(values)) if values else values


Layers = Annotated[
    list[str] | None,
    typer.Option(
        help="Only these layers (qkv, o, gate_up, down): comma-separated, or the option repeated.",
        callback=_layer_names,
    ),
]
OutDtypeOption = Annotated[OutDtype, typer.Option(help="Output dtype.")]
Seed = Annotated[int, typer.Option(help="Seed of the generated inputs.")]
OutputDir = Annotated[
    Path,
    typer.Option(
        help="Directory for the result files (JSON, CSV, markdown, PNG; the command says which); the "
        "default, bench-results in the current directory, is git-ignored in a checkout."
    ),
]
Plots = Annotated[bool, typer.Option(help="Draw the PNG(s) (needs matplotlib).")]


# --------------------------------------------------------------------------------------------
# Parsers
# --------------------------------------------------------------------------------------------
def split_names(text: str) -> list[str]:
    """A comma-separated list, spaces dropped, each name once, in order."""
    return list(dict.fromkeys(v for v in text.replace(" ", "").split(",") if v))


def parse_ints(text: str, option: str) -> list[int]:
    """Comma-separated positive integers, each once, in order."""
    try:
        values = [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise typer.BadParameter(
            f"expected comma-separated integers, got {text!r}", param_hint=option
        ) from None
    if not values or min(values) < 1:
        raise typer.BadParameter(f"expected positive integers, got {text!r}", param_hint=option)
    return list(dict.fromkeys(values))


def parse_formats(text: str, option: str = "--formats") -> list[str]:
    """Comma-separated formats (``all``: every one), each once, in order."""
    names = split_names(text)
    if names == ["all"]:
        return list(FORMATS)
    if not names:
        raise typer.BadParameter(f"no format given; choose from {list(FORMATS)} or all", param_hint=option)
    try:
        return check_formats(names)
    except ValueError as exc:
        raise typer.BadParameter(f"{exc} or all", param_hint=option) from None


def parse_format(text: str, option: str = "--format") -> str:
    """One format name."""
    try:
        (name,) = check_formats([text])
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None
    return name


def parse_gpu(text: str, config_roots: Iterable[Path] = (), option: str = "--gpu") -> str:
    """A GPU's canonical name (``"NVIDIA H200"`` -> ``nvidia_h200``), checked against the known ones
    (:func:`hlcore.config_store.known_gpu_names`: the SM90 GPUs and the scaled_mm config files of the
    shipped configs, ``$HL_CONFIG_DIR`` and ``config_roots``) and this machine's GPU."""
    from hlcore.config_store import SCALED_MM_KERNEL, canonical_gpu_name, known_gpu_names
    from hlcore.configs import config_dir, shipped_config_dir

    roots = [shipped_config_dir(), config_dir(), *config_roots]
    known = known_gpu_names(roots, SCALED_MM_KERNEL)
    here = _this_gpu()
    known += [here] if here and here not in known else []
    try:
        name = canonical_gpu_name(text)
    except ValueError:
        name = ""
    if name not in known:
        raise typer.BadParameter(
            f"unknown GPU {text!r}; known: {', '.join(known)} (SM90 GPUs and existing config files)",
            param_hint=option,
        )
    return name


def _this_gpu() -> str | None:
    """This machine's canonical GPU name (None without a CUDA GPU)."""
    if not cuda_available():
        return None
    from hlcore.config_store import current_gpu_name

    return current_gpu_name()


def load_model(name: str, option: str = "--model") -> dict[str, Any]:
    """The config.json ``name`` resolves to (:func:`resolve_model`)."""
    return resolve_model(name, option).config


def resolve_model(name: str, option: str = "--model", out: Console | None = None) -> ModelSource:
    """``name`` resolved offline (:func:`hltools.model_source.resolve_model`: a path, an embedded
    model, the Hugging Face cache, or the id's base model), its notes printed to ``out`` (stderr by
    default); one that resolves nowhere is a bad value of ``option`` (exit 2)."""
    try:
        source = model_source.resolve_model(name)
    except (ValueError, FileNotFoundError) as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None
    for note in source.notes:
        (out or Console(stderr=True)).print(f"[yellow]{note}[/yellow]", highlight=False, soft_wrap=True)
    return source


def model_formats(
    formats: str | None, source: ModelSource, out: Console | None = None, option: str = "--formats"
) -> list[str]:
    """``--formats`` as given, else the model's own format (its ``quantization_config`` or id, said
    on ``out``, stderr by default, beside :func:`resolve_model`'s notes), else ``fp8_dynamic``."""
    if formats is not None:
        return parse_formats(formats, option)
    out = out or Console(stderr=True)
    if source.fmt is not None:
        named_by = (
            "the quantization_config of"
            if source.fmt_from == "quantization_config"
            else "the words of the id"
        )
        out.print(
            f"format {source.fmt}: from {named_by} {source.name} ({option} overrides)",
            highlight=False,
            soft_wrap=True,
        )
        return [source.fmt]
    if source.source != f"embedded model {source.name.lower()}":  # a checkpoint that names no format
        out.print(
            f"format fp8_dynamic: {source.name} names no format ({option} overrides)",
            highlight=False,
            soft_wrap=True,
        )
    return ["fp8_dynamic"]


def load_models(text: str, option: str = "--model") -> list[tuple[str, dict[str, Any]]]:
    """``(name, config)`` of each comma-separated model."""
    models = [(name, load_model(name, option)) for name in split_names(text)]
    if not models:
        raise typer.BadParameter("no model given", param_hint=option)
    return models


def bad_parameter(exc: Exception, option: str | None = None) -> typer.BadParameter:
    """A library's ``ValueError`` as the bad value of ``option`` (exit code 2)."""
    return typer.BadParameter(str(exc), param_hint=option)


# --------------------------------------------------------------------------------------------
# Output and environment
# --------------------------------------------------------------------------------------------
def console(stderr: bool = False) -> Console:
    """rich's console (on stderr with ``stderr``); at least 200 columns wide when the output is not a
    terminal (logs, tests)."""
    out = Console(stderr=stderr)
    return out if out.is_terminal else Console(stderr=stderr, width=max(out.width, 200))


def command_line() -> str:
    """This command as one shell line (``hltools ...``), for metadata and repro hints."""
    return shlex.join(["hltools", *sys.argv[1:]])


def progress(out: Console, description: str = "{task.description}", *, eta: bool = False) -> Progress:
    """rich's progress bar of the commands: description, bar, done/total, elapsed (and ETA)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = [TextColumn(description), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    columns += [TextColumn("ETA"), TimeRemainingColumn()] if eta else []
    return Progress(*columns, console=out)


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def cuda_device_count() -> int:
    import torch

    return torch.cuda.device_count()


def require_gpu(command: str, why: str) -> None:
    """Exit with :data:`NO_GPU_EXIT` and say why (on stderr) when no CUDA GPU is visible."""
    if not cuda_available():
        fail(f"{command} needs a CUDA GPU ({why}); none was found.", NO_GPU_EXIT)


def fail(message: str, code: int = 1) -> NoReturn:
    """A run that cannot start, or an input it cannot read: ``message`` in bold red on stderr, as
    written (no rich markup: paths and ``hltools[ray]`` print as they are), then exit ``code``.
    stdout keeps what a command produces (``--list``'s table, a report); typer's own bad-option
    errors go to stderr too."""
    console(stderr=True).print(message, style="bold red", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(code)
