"""Engines we drive as subprocesses: pick the adapter for a recipe and start it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from frankenstein.config import ResolvedRecipe
from frankenstein.engines.base import Engine, Reply
from frankenstein.errors import ConfigError

__all__ = ["Engine", "Reply", "adapter_for", "start_engine"]


def adapter_for(recipe: ResolvedRecipe, log_dir: Path, *, port: int | None = None) -> Engine:
    if recipe.engine == "llamacpp":
        from frankenstein.engines.llamacpp import LlamaCppEngine

        return LlamaCppEngine(recipe, log_dir, port=port)
    if recipe.engine == "vllm":
        from frankenstein.engines.vllm import VllmEngine  # type: ignore[import-not-found]

        return VllmEngine(recipe, log_dir, port=port)  # type: ignore[no-any-return]
    if recipe.engine == "sglang":
        from frankenstein.engines.sglang import SglangEngine  # type: ignore[import-not-found]

        return SglangEngine(recipe, log_dir, port=port)  # type: ignore[no-any-return]
    if recipe.engine == "openai":
        return Engine(recipe, log_dir, port=port)
    raise ConfigError(f"unknown engine {recipe.engine!r}", field="engine")


@contextmanager
def start_engine(recipe: ResolvedRecipe, log_dir: Path, *, port: int | None = None) -> Iterator[Engine]:
    """Start, yield when ready, and always stop (also on Ctrl-C and on errors)."""
    engine = adapter_for(recipe, log_dir, port=port)
    engine.start()
    try:
        yield engine
    finally:
        engine.stop()
