"""Engines we drive as subprocesses: pick the adapter for a recipe and start it.

The contract is :class:`~frankenstein.engines.contract.Engine` (plus capability protocols);
:data:`ADAPTERS` maps a recipe's ``engine`` to its adapter class — adding an engine is one module
and one line here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from frankenstein.config import ResolvedRecipe
from frankenstein.engines.base import ProcessEngine
from frankenstein.engines.contract import Engine, ForcedDecoder, Reply, TopLogprobs
from frankenstein.engines.external import ExternalEngine
from frankenstein.engines.llamacpp import LlamaCppEngine
from frankenstein.engines.openai import OpenAIEngine
from frankenstein.engines.sglang import SglangEngine
from frankenstein.engines.vllm import VllmEngine
from frankenstein.errors import ConfigError

__all__ = [
    "ADAPTERS",
    "Engine",
    "ForcedDecoder",
    "ProcessEngine",
    "Reply",
    "TopLogprobs",
    "adapter_class",
    "adapter_for",
    "launch_command",
    "start_engine",
]

ADAPTERS: dict[str, type[ProcessEngine]] = {
    "llamacpp": LlamaCppEngine,
    "vllm": VllmEngine,
    "sglang": SglangEngine,
    "openai": OpenAIEngine,
    "external": ExternalEngine,
}


def adapter_class(recipe: ResolvedRecipe, config_path: object = "frank.toml") -> type[ProcessEngine]:
    """The adapter of ``recipe.engine``; an unknown one is a ConfigError naming ``config_path`` and the field."""
    cls = ADAPTERS.get(recipe.engine)
    if cls is None:
        base = recipe.name.split("+")[0]  # a recipe with parts is named base+part+...
        raise ConfigError(
            f"unknown engine {recipe.engine!r} (known: {', '.join(ADAPTERS)})",
            path=config_path,
            field=f"recipes.{base}.engine",
        )
    return cls


def adapter_for(recipe: ResolvedRecipe, log_dir: Path, *, port: int | None = None) -> ProcessEngine:
    return adapter_class(recipe)(recipe, log_dir, port=port)


SHOWN_PORT = 65499  # a stand-in port for a command shown before any start; printed as {port}


def launch_command(recipe: ResolvedRecipe, log_dir: Path) -> list[str]:
    """The command line a start of ``recipe`` runs, without starting anything (``{port}`` for the port each
    start picks); the recipe is checked first, as a start checks it."""
    engine = adapter_for(recipe, log_dir)
    engine.check_recipe()
    if isinstance(engine, ExternalEngine):
        return []
    return [a.replace(str(SHOWN_PORT), "{port}") for a in engine.command(SHOWN_PORT)]


@contextmanager
def start_engine(recipe: ResolvedRecipe, log_dir: Path, *, port: int | None = None) -> Iterator[ProcessEngine]:
    """Start, yield when ready, and always stop (also on Ctrl-C and on errors)."""
    engine = adapter_for(recipe, log_dir, port=port)
    engine.start()
    try:
        yield engine
    finally:
        engine.stop()
