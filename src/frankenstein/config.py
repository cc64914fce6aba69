"""``frank.toml``: the parts and recipes of a campaign (pydantic, ``extra="forbid"``).

A *part* is a named change to an engine; a *recipe* is engine + model + base arguments + ordered
parts. ``served`` names the base recipe; the ledger (``frank adopt``) appends parts to it.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from frankenstein.errors import ConfigError, UnknownNameError
from frankenstein.flags import apply_part, is_flag
from frankenstein.measure.usermetrics import UserMetric, check_metric_name
from frankenstein.shipped import expand
from frankenstein.validation import FrozenUserFile, field_error, http_root, read_toml

# An engine adapter's name; which names exist is the adapter table's business (engines.ADAPTERS):
# registration refuses an unknown one naming the arm, and `frank replay`/`frank engine check` name it too.
EngineKind = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]{0,31}$")]

# Design, recipe, part and campaign names: a slug, so a name is never a path (no '/', no '..', no leading
# '.' or '-', no spaces) and every file frank names after one stays inside the campaign folder.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
_NAME = re.compile(NAME_PATTERN)


def check_name(value: str) -> str:
    if not _NAME.fullmatch(value):
        shown = value if len(value) <= 40 else value[:40] + "…"
        raise ValueError(
            f"{shown!r} is not a name: a name is 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return value


Name = Annotated[str, AfterValidator(check_name)]

# The name of an environment variable that holds a cache folder (``cache_vars``): frank points it at the
# arm's own folder inside the campaign, under the design's cache policy (design/caches.py).
CacheVar = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]


# Launch inputs (issue 30): what no program can be given is refused where frank.toml loads, naming the field,
# instead of failing later inside ``run``: a NUL in an argument or value, an environment name with '=' (or empty).


def check_arg(value: str) -> str:
    if "\0" in value:
        raise ValueError("contains a NUL character, which no program can be given as an argument")
    return value


def check_env_name(value: str) -> str:
    if not value or "=" in value or "\0" in value:
        raise ValueError(
            f"{value!r} is not an environment variable name (it must be non-empty, without '=' or a NUL character)"
        )
    return value


Arg = Annotated[str, AfterValidator(check_arg)]
EnvName = Annotated[str, AfterValidator(check_env_name)]
Env = dict[EnvName, Arg]
Command = Annotated[list[Arg], Field(min_length=1, description="a program and its arguments (at least the program)")]


class Provenance(FrozenUserFile):
    """Where a piece comes from, for the note's credits: a part's, a recipe's, a model's, an engine's, a format's."""

    fork: str = Field(default="", description="where it comes from: a repository, a fork, a model page")
    commit: str = Field(default="", description="the commit or version")
    author: str = ""
    licence: str = ""
    credit: str = Field(default="", description="what the credit is for, in words (printed in the note's credits)")


class NoteHeader(FrozenUserFile):
    """``[note]``: the campaign's progress note as its authors present it, printed as given."""

    title: str = Field(default="", description="the note's title (default: 'Progress note: CAMPAIGN')")
    series: str = Field(default="", description="the series it belongs to, e.g. 'Part 2 of our Frankenstein'")
    authors: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    assistance: str = Field(default="", description="an assistance or method paragraph, printed at the end")


class Part(FrozenUserFile):
    """A named change to an engine. Its flags, applied in this order: ``remove`` (each flag with its value),
    ``set`` (one occurrence with this value, where the flag stood or appended; ``""`` for a flag with no
    value), then ``args`` and ``add`` appended as given (frankenstein/flags.py)."""

    description: str = ""
    remove: list[str] = Field(default_factory=list)
    set_flags: dict[str, Arg] = Field(default_factory=dict, alias="set")
    args: list[Arg] = Field(default_factory=list)
    add: list[Arg] = Field(default_factory=list)
    env: Env = Field(default_factory=dict)
    binary: Arg | None = None
    python: Arg | None = None
    model: Arg | None = None
    cache_vars: list[CacheVar] = Field(
        default_factory=list,
        description="environment variables that hold a cache folder of this part (e.g. a kernel cache): "
        "frank sets each to a folder of the arm's own inside the campaign, warm or cold as the design says",
    )
    provenance: Provenance = Provenance()

    @field_validator("remove")
    @classmethod
    def _remove_flags(cls, flags: list[str]) -> list[str]:
        return [_a_flag(f, "remove") for f in flags]

    @field_validator("set_flags")
    @classmethod
    def _set_flags(cls, flags: dict[str, str]) -> dict[str, str]:
        for f in flags:
            _a_flag(f, "set")
        return flags


def _a_flag(token: str, where: str) -> str:
    if not is_flag(token) or "=" in token:
        raise ValueError(f"{token!r} is not a flag: {where} takes flag names such as '--threads' (no value, no '=')")
    return token


class Recipe(FrozenUserFile):
    engine: EngineKind = "llamacpp"
    model: Arg = ""
    args: list[Arg] = Field(default_factory=list)
    env: Env = Field(default_factory=dict)
    binary: Arg | None = None
    python: Arg | None = None
    command: Command | None = None
    parts: list[str] = Field(default_factory=list)
    start_timeout_s: float = Field(default=300.0, gt=0, allow_inf_nan=False)
    cache_vars: list[CacheVar] = Field(
        default_factory=list,
        description="environment variables that hold a cache folder of this recipe's engine or command",
    )
    provenance: Provenance = Provenance()

    @model_validator(mode="after")
    def _external(self) -> Recipe:
        """A server frank does not start (``engine = "external"``) takes its URL and a start timeout, nothing
        else: a model, env, binary, python, command, part or cache variable could not be applied to it, and a
        start must not record what it did not apply (docs/engines.md)."""
        if self.engine != "external":
            return self
        given = [k for k in EXTERNAL_UNAPPLIED if getattr(self, k)]
        if given:
            raise ValueError(
                f"{', '.join(given)}: an external recipe names a server frank does not start, so nothing of its "
                'launch can be applied to it; keep only args = ["--url", "http://HOST:PORT"] and start_timeout_s'
            )
        if len(self.args) != 2 or self.args[0] != "--url":
            raise ValueError('args: an external recipe needs args = ["--url", "http://HOST:PORT"] and nothing else')
        try:
            http_root(self.args[1])
        except ValueError as exc:
            raise ValueError(f"args[1]: {exc}") from exc
        return self


# What of a recipe's launch a server frank did not start cannot be given, each with its empty value: refused in
# an external recipe, and dropped from a recipe pointed at a running server (engines/external.py).
EXTERNAL_UNAPPLIED: dict[str, Any] = {
    "model": "",
    "env": {},
    "binary": None,
    "python": None,
    "command": None,
    "parts": [],
    "cache_vars": [],
}


class ClusterConfig(FrozenUserFile):
    """``[cluster]``: where ``frank run`` sends blocks (docs/cluster.md)."""

    ray: str | None = Field(default=None, min_length=1, description='"auto" or a Ray address (HOST:PORT)')
    gpus: float = Field(default=0.0, ge=0, allow_inf_nan=False, description="GPUs one block needs on its host")


class IntegrityConfig(FrozenUserFile):
    """``[integrity]``: a copy of the chain's head kept outside the campaign (docs/integrity.md)."""

    head_mirror: str | None = Field(
        default=None,
        min_length=1,
        description="a file outside the campaign folder that every commit appends its head line to, and every "
        "command that verifies checks the chain against",
    )


class CampaignConfig(FrozenUserFile):
    name: Name = "campaign"
    served: Name = "base"
    recipes: dict[str, Recipe] = Field(default_factory=dict)
    parts: dict[str, Part] = Field(default_factory=dict)
    cluster: ClusterConfig = ClusterConfig()
    # Credits beyond parts and recipes: the model, the engine, the weight format (name -> provenance).
    models: dict[str, Provenance] = Field(default_factory=dict)
    engines: dict[str, Provenance] = Field(default_factory=dict)
    formats: dict[str, Provenance] = Field(default_factory=dict)
    note: NoteHeader = NoteHeader()
    metrics: dict[str, UserMetric] = Field(default_factory=dict)  # user metrics (measure/usermetrics.py)
    integrity: IntegrityConfig = IntegrityConfig()

    @field_validator("recipes", "parts")
    @classmethod
    def _names(cls, table: dict[str, object]) -> dict[str, object]:
        for key in table:
            check_name(key)
        return table


class ResolvedRecipe(FrozenUserFile):
    """A recipe with its parts applied: what an engine adapter launches."""

    name: str
    engine: EngineKind
    model: str
    args: list[str]
    env: dict[str, str]
    binary: str | None = None
    python: str | None = None
    command: list[str] | None = None
    parts: list[str] = Field(default_factory=list)
    start_timeout_s: float = 300.0
    cache_vars: list[str] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """``cache_vars`` is left out when empty, so recipes frozen before it existed keep their
        canonical text (and a design's hash)."""
        out: dict[str, Any] = handler(self)
        if not out.get("cache_vars", True):
            del out["cache_vars"]
        return out

    def launch_differences(self, other: ResolvedRecipe) -> list[str]:
        """The fields that change what is launched (engine, model, args, env, binary, python, command) and differ."""
        return [k for k in LAUNCH_FIELDS if getattr(self, k) != getattr(other, k)]


LAUNCH_FIELDS = ("engine", "model", "args", "env", "binary", "python", "command", "cache_vars")


def program_problem(recipe: ResolvedRecipe) -> str | None:
    """Why the program a start of ``recipe`` executes cannot run, or None: a ``command`` whose program is not
    found, or a ``binary`` or ``python`` that is missing, a folder, or not executable (engines use either as given)."""
    if recipe.command:
        return command_problem(recipe.command)
    for name, value in (("binary", recipe.binary), ("python", recipe.python)):
        problem = executable_problem(value) if value else None
        if problem:
            return f"{name} {problem}"
    return None


def command_problem(command: Sequence[str]) -> str | None:
    """Why ``command``'s program cannot be executed (looked up on PATH like the shell), or None."""
    program = command[0] if command else ""
    if not program:
        return "the command names no program"
    if shutil.which(program) is not None:
        return None
    if "/" in program:
        return f"command program {executable_problem(program) or program + ' is not executable'}"
    return f"command program {program!r} is not found on PATH"


def executable_problem(value: str) -> str | None:
    """Why the file ``value`` cannot be executed (missing, a folder, not executable), or None."""
    path = Path(expand(value))
    if path.is_dir():
        return f"{path} is a directory, not a program"
    if not path.is_file():
        return f"{path} does not exist"
    if not os.access(path, os.X_OK):
        return f"{path} is not executable"
    return None


def load_config(path: str | Path) -> CampaignConfig:
    path = Path(path)
    data = read_toml(path)
    try:
        config = CampaignConfig.model_validate(data)
    except ValidationError as exc:
        raise field_error(path, exc) from exc
    for table, entries in (("recipes", config.recipes), ("parts", config.parts)):
        for name, entry in entries.items():
            both = sorted(set(entry.env) & set(entry.cache_vars))
            if both:
                raise ConfigError(
                    f"{', '.join(both)} is both set in env and named in cache_vars: a named cache variable's folder "
                    "is frank's to set (inside the campaign); remove it from env",
                    path=path,
                    field=f"{table}.{name}.cache_vars",
                )
    for mname in config.metrics:
        try:
            check_metric_name(mname)
        except ValueError as exc:
            raise ConfigError(str(exc), path=path, field=f"metrics.{mname}") from exc
    for rname, recipe in config.recipes.items():
        for i, p in enumerate(recipe.parts):
            if p not in config.parts:
                raise ConfigError(
                    f"unknown part {p!r} (known: {known_names(config.parts)})",
                    path=path,
                    field=f"recipes.{rname}.parts[{i}]",
                )
    if config.served not in config.recipes:
        raise ConfigError(
            f"unknown recipe {config.served!r} (known: {known_names(config.recipes)})", path=path, field="served"
        )
    return config


def known_names(table: Mapping[str, object]) -> str:
    """The names of a ``frank.toml`` table for a message: sorted, comma-separated, or ``none``."""
    return ", ".join(sorted(table)) or "none"


def resolve(
    config: CampaignConfig, recipe_name: str, extra_parts: Sequence[str] = (), base_dir: Path | None = None
) -> ResolvedRecipe:
    """Apply a recipe's parts (and any extra ones) in order; later parts override binary/model.
    An unknown name is an :class:`UnknownNameError` (with the extra part's index), which the caller turns into
    its own file and field."""
    if recipe_name not in config.recipes:
        raise UnknownNameError(
            f"unknown recipe {recipe_name!r} (known: {known_names(config.recipes)})", what="recipe", name=recipe_name
        )
    r = config.recipes[recipe_name]
    args, env = list(r.args), dict(r.env)
    cache_vars = list(r.cache_vars)
    binary, python, model = r.binary, r.python, r.model
    names = [*r.parts, *extra_parts]
    for i, name in enumerate(names):
        if name not in config.parts:
            raise UnknownNameError(
                f"unknown part {name!r} (known: {known_names(config.parts)})",
                what="part",
                name=name,
                index=i - len(r.parts),
            )
        part = config.parts[name]
        args = apply_part(args, part.remove, part.set_flags, [*part.args, *part.add])
        env.update(part.env)
        binary = part.binary or binary
        python = part.python or python
        model = part.model or model
        cache_vars += [v for v in part.cache_vars if v not in cache_vars]
    env = {k: v for k, v in env.items() if k not in cache_vars}  # a named cache variable is frank's to set
    args = [expand(a) for a in args]
    model = expand(model)
    if base_dir is not None and model and not Path(model).is_absolute():
        model = str((base_dir / model).resolve())
    return ResolvedRecipe(
        name=recipe_name if not extra_parts else f"{recipe_name}+{'+'.join(extra_parts)}",
        engine=r.engine,
        model=model,
        args=args,
        env=env,
        binary=binary,
        python=python,
        command=r.command,
        parts=names,
        start_timeout_s=r.start_timeout_s,
        cache_vars=cache_vars,
    )
