"""Engines we drive as subprocesses: pick the adapter for a recipe and start it.

The contract is :class:`~frankenstein.engines.contract.Engine` (plus capability protocols);
:data:`ADAPTERS` maps a recipe's ``engine`` to its adapter class — adding an engine is one module
and one line here (a test adds a test-only adapter with :func:`register_adapter`). What the rest of frank
may know about an engine is its adapter's :class:`~frankenstein.engines.traits.EngineTraits`, read through
:func:`traits_of`: no module outside ``engines/`` names an engine.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from frankenstein.config import ResolvedRecipe
from frankenstein.engines.base import ProcessEngine
from frankenstein.engines.contract import Engine, ForcedDecoder, Reply, TopLogprobs
from frankenstein.engines.external import ExternalEngine
from frankenstein.engines.llamacpp import LlamaCppEngine
from frankenstein.engines.openai import OpenAIEngine
from frankenstein.engines.process import inherited_settings
from frankenstein.engines.sglang import SglangEngine
from frankenstein.engines.traits import NO_TRAITS, EngineTraits, TokenizeDialect
from frankenstein.engines.vllm import VllmEngine
from frankenstein.errors import ConfigError

__all__ = [
    "ADAPTERS",
    "Engine",
    "EngineTraits",
    "ForcedDecoder",
    "ProcessEngine",
    "Reply",
    "TopLogprobs",
    "adapter_class",
    "adapter_for",
    "cache_vars",
    "command_recipe",
    "engine_settings",
    "launch_command",
    "process_names",
    "register_adapter",
    "start_engine",
    "tokenize_dialects",
    "traits_of",
    "version_lines",
]

ADAPTERS: dict[str, type[ProcessEngine]] = {
    "llamacpp": LlamaCppEngine,
    "vllm": VllmEngine,
    "sglang": SglangEngine,
    "openai": OpenAIEngine,
    "external": ExternalEngine,
}


def register_adapter(name: str, cls: type[ProcessEngine]) -> type[ProcessEngine]:
    """Add an adapter to :data:`ADAPTERS` under ``name`` (a test registers a test-only adapter this way);
    a name already taken by another class is refused."""
    if ADAPTERS.get(name, cls) is not cls:
        raise ValueError(f"engine {name!r} is already {ADAPTERS[name].__name__}")
    ADAPTERS[name] = cls
    return cls


def command_recipe(command: list[str]) -> ResolvedRecipe:
    """The recipe a command arm's start records: the generic OpenAI-compatible adapter's, running ``command``."""
    return ResolvedRecipe(name="command", engine="openai", model="", args=[], env={}, command=command)


def traits_of(engine: str) -> EngineTraits:
    """What frank may know about the engine a recipe names (its adapter's traits); :data:`NO_TRAITS` for a
    name the table lacks (registration refuses those, naming the arm)."""
    cls = ADAPTERS.get(engine)
    return NO_TRAITS if cls is None else cls.traits


def process_names() -> tuple[str, ...]:
    """Words that mark a running process as an engine (the noise guard's ``other_engines``)."""
    return tuple(dict.fromkeys(n for cls in ADAPTERS.values() for n in cls.traits.process_names))


def cache_vars() -> dict[str, str]:
    """{variable: sub-folder} of every adapter's cache variables (set for every launch: design/caches.py)."""
    return {var: sub for cls in ADAPTERS.values() for var, sub in cls.traits.cache_vars}


def tokenize_dialects() -> tuple[TokenizeDialect, ...]:
    """Every ``/tokenize`` dialect an adapter speaks, in table order (what ``frank serve`` probes)."""
    return tuple(dict.fromkeys(d for cls in ADAPTERS.values() if (d := cls.traits.tokenize) is not None))


def version_lines() -> list[str]:
    """Each adapter's version line (``frank --version``, ``frank doctor``), found without starting an engine."""
    return [line for cls in ADAPTERS.values() if (line := cls.traits.version_line()) is not None]


def engine_settings(
    engine: str, frank_sets: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The setting variables a start of ``engine`` inherits from frank's environment (the libraries' and the
    engine's own; for an engine whose program is unknown, every adapter's), credentials redacted
    (:func:`frankenstein.engines.process.inherited_settings`)."""
    traits = traits_of(engine)
    if traits.settings is None:
        known = [cls.traits for cls in ADAPTERS.values()]
        return inherited_settings(frank_sets, environ, lambda k: any(t.sets(k) for t in known))
    return inherited_settings(frank_sets, environ, traits.sets)


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
