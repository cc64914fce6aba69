"""What the rest of frank may know about an engine, declared once on its adapter.

Every adapter class carries one :class:`EngineTraits` (``traits = EngineTraits(...)``), and every room outside
``engines/`` reads it through :func:`frankenstein.engines.traits_of` (``traits_of(recipe.engine)``): no module
outside ``engines/`` names an engine. A name the adapter table lacks gets :data:`NO_TRAITS` (nothing drafts,
no dialect, every adapter's settings); registration refuses such a name anyway, naming the arm.

    traits_of("llamacpp").drafts(["-md", "d.gguf"])      -> True
    traits_of("llamacpp").program(recipe)                -> "/usr/bin/llama-server" (None: not found)
    traits_of("vllm").python(recipe)                     -> "/srv/.venv-vllm/bin/python" (None: runs no Python)
    traits_of("vllm").tokenize                           -> OPENAI_TOKENIZE
    traits_of("external").launched                       -> False
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from frankenstein.config import ResolvedRecipe
from frankenstein.errors import EngineError
from frankenstein.shipped import expand


@dataclass(frozen=True)
class TokenizeDialect:
    """The body an engine's ``POST /tokenize`` reads: ``{text_key: TEXT, special_key: BOOL}``."""

    name: str
    text_key: str
    special_key: str

    def body(self, text: str, add_special_tokens: bool) -> dict[str, Any]:
        return {self.text_key: text, self.special_key: add_special_tokens}


LLAMACPP_TOKENIZE = TokenizeDialect("llama.cpp", "content", "add_special")
OPENAI_TOKENIZE = TokenizeDialect("vLLM/SGLang", "prompt", "add_special_tokens")


def command_program(recipe: ResolvedRecipe) -> str | None:
    """The program of a recipe's own ``command`` as PATH finds it, else None (every engine's default)."""
    return shutil.which(recipe.command[0]) if recipe.command else None


def recipe_python(recipe: ResolvedRecipe) -> str | None:
    """The recipe's own ``python`` as PATH finds it, else None (every engine's default)."""
    return shutil.which(expand(recipe.python)) if recipe.python else None


def launched_python(recipe: ResolvedRecipe, find: Callable[[str | None], str]) -> str | None:
    """The interpreter a Python engine's start runs in, found by the adapter's own lookup ``find`` (the recipe's
    ``python``, else its environment variable or local folder), not resolved through symlinks (a virtual
    environment's ``python`` is a link, and its packages are the environment's); None for a recipe that runs its
    own ``command`` without a ``python``, or where none is found."""
    if recipe.command and not recipe.python:
        return None
    try:
        return find(recipe.python)
    except EngineError:
        return None


def python_program(recipe: ResolvedRecipe, python: str | None) -> str | None:
    """The program a Python engine's start executes: its own command's, else the file the interpreter
    ``python`` really is (resolved through symlinks: a venv's ``python`` links to it)."""
    if recipe.command:
        return command_program(recipe)
    return os.path.realpath(python) if python else None


def no_problem(recipe: ResolvedRecipe) -> str | None:
    return None


def no_draft_models(args: Sequence[str]) -> list[tuple[str, str]]:
    return []


def no_version() -> str | None:
    return None


@dataclass(frozen=True)
class EngineTraits:
    """An engine's facts (defaults: an engine frank launches from a recipe command, nothing more known).

    - ``draft_flags``: launch flags that turn speculative decoding on (an arm without one drafts nothing);
    - ``process_names``: words in a running process's command line that say it is this engine (noise guard);
    - ``tokenize``: the dialect of its ``POST /tokenize``, None when unknown (then it is probed);
    - ``settings``: environment variables it reads as settings (besides the libraries' under every engine,
      :data:`frankenstein.engines.process.LIBRARY_SETTINGS`): exact names, or prefixes ending in ``_`` or ``*``;
      None for an engine whose program is unknown (a recipe command): every adapter's settings count then;
    - ``cache_vars``: (variable, sub-folder) of each environment variable that holds its cache folder (frank points
      it at the arm's own folder in the campaign, warm or cold as the design says: design/caches.py);
    - ``launched``: frank launches it (False: a server already running; it is given no env, part or cache folder);
    - ``fresh_starts``: each start is a fresh engine life;
    - ``program(recipe)``: the program a start executes on this host, None where it cannot be found;
    - ``python(recipe)``: the interpreter whose environment a start runs in (its packages are pinned), as the
      adapter finds it, None for a start that runs no Python of the recipe's;
    - ``launch_problem(recipe)``: why a start cannot succeed before anything launches (registration refuses);
    - ``draft_models(args)``: (flag, file) of every draft model file the launch args name (pinned);
    - ``version_line()``: its line in ``frank --version`` and ``frank doctor``, found without starting it;
    - ``thread_flags``: launch flags that set its CPU threads (the noise guard expects that many runnable threads
      of the arm's own).
    """

    draft_flags: tuple[str, ...] = ()
    process_names: tuple[str, ...] = ()
    tokenize: TokenizeDialect | None = None
    settings: tuple[str, ...] | None = None
    cache_vars: tuple[tuple[str, str], ...] = ()
    launched: bool = True
    fresh_starts: bool = True
    program: Callable[[ResolvedRecipe], str | None] = command_program
    python: Callable[[ResolvedRecipe], str | None] = recipe_python
    launch_problem: Callable[[ResolvedRecipe], str | None] = no_problem
    draft_models: Callable[[Sequence[str]], list[tuple[str, str]]] = no_draft_models
    version_line: Callable[[], str | None] = no_version
    thread_flags: tuple[str, ...] = ()

    def threads(self, args: Sequence[str]) -> int:
        """The CPU threads launch ``args`` give it (the last of :attr:`thread_flags` wins, ``=VALUE`` or the next
        word); 0 when none is given or the value is not a positive whole number."""
        value = None
        for i, a in enumerate(args):
            name, eq, tail = a.partition("=")
            if name in self.thread_flags:
                value = tail if eq else (args[i + 1] if i + 1 < len(args) else None)
        return int(value) if value is not None and value.isdigit() else 0

    def drafts(self, args: Sequence[str]) -> bool:
        """Whether launch ``args`` turn speculative decoding on (a flag of :attr:`draft_flags`, ``=VALUE`` or not)."""
        return any(a.split("=", 1)[0] in self.draft_flags for a in args)

    def sets(self, name: str) -> bool:
        """Whether the environment variable ``name`` is one of this engine's settings."""
        return any(
            name == s or (s.endswith(("_", "*")) and name.startswith(s.rstrip("*"))) for s in self.settings or ()
        )


NO_TRAITS = EngineTraits()
