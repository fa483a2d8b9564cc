"""hlvllm settings, read from environment variables (one table: docs/configuration.md).

| variable | default | effect |
| --- | --- | --- |
| ``HL_LINEAR_BACKEND`` | unset (off) | ``helion`` enables the plugin's linear kernels; anything else leaves vLLM untouched |
| ``HL_MAX_HELION_SIZE`` | ``32`` | largest num_tokens routed to Helion (``max_helion_size``); larger batches use vLLM's kernel |
| ``HL_HELION_EAGER`` | ``0`` | ``1``: also use Helion outside CUDA-graph capture (tests, benchmarks; slow on the host) |
| ``HL_DISPATCH_LOG`` | ``0`` | ``1``: log the first dispatch of every (path, M, N, K) |
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

_TRUE = {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class Settings:
    enabled: bool
    max_helion_size: int
    helion_eager: bool
    dispatch_log: bool


def _int_env(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a non-negative integer; got {raw!r}") from None
    if value < 0:
        raise ValueError(f"{name} must be a non-negative integer; got {raw!r}")
    return value


@functools.cache
def get_settings() -> Settings:
    """The settings of this process (cached; tests call ``get_settings.cache_clear()``)."""
    return Settings(
        enabled=os.environ.get("HL_LINEAR_BACKEND", "").strip().lower() == "helion",
        max_helion_size=_int_env("HL_MAX_HELION_SIZE", 32),
        helion_eager=os.environ.get("HL_HELION_EAGER", "").strip().lower() in _TRUE,
        dispatch_log=os.environ.get("HL_DISPATCH_LOG", "").strip().lower() in _TRUE,
    )
