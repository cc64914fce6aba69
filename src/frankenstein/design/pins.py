"""The files a start of an arm runs, identified by sha256 when the design is registered.

Per arm: the engine binary (``llama-server`` as the engine would find it, or a recipe command's program), the
model file and draft model files; for a command arm its program and every argument that is an absolute path to
a file. Registration stores them in the frozen design (``FrozenDesign.files``, so in the design hash); a host
of a Ray cluster checks them before each start (:mod:`frankenstein.cluster.checks`).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from frankenstein.config import ResolvedRecipe, draft_model_args
from frankenstein.engines.llamacpp import find_llama_server
from frankenstein.errors import EngineError
from frankenstein.measure.machine import binary_sha256
from frankenstein.shipped import expand

BINARY = "engine binary"


@dataclass(frozen=True)
class Pin:
    arm: str
    role: str  # engine binary | model | draft model | command program | command file
    path: str  # the registering host's path (another host resolves the engine binary itself)
    sha256: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def of(cls, d: Mapping[str, object]) -> Pin:
        """A pin from its stored form (``as_dict``)."""
        return cls(**{k: str(v) for k, v in d.items()})


def engine_program(recipe: ResolvedRecipe) -> str | None:
    """The program a start of ``recipe`` executes on this host, or None where it cannot be found."""
    try:
        if recipe.command:
            return shutil.which(recipe.command[0])
        if recipe.engine == "llamacpp":
            return find_llama_server(recipe.binary)
    except EngineError:
        return None
    return None


def model_files(recipe: ResolvedRecipe) -> list[tuple[str, Path]]:
    """(role, resolved path) of the files a start of ``recipe`` loads: its model (the file, or every file of a
    model folder) and its draft model files. A hub name or a path that is not here names nothing."""
    out: dict[Path, str] = {}
    named = [("model", recipe.model), *(("draft model", v) for _, v in draft_model_args(recipe.args) if v)]
    for role, value in named:
        path = Path(expand(value)) if value else None
        if path is None:
            continue
        if path.is_file():
            out.setdefault(path.resolve(), role)
        elif path.is_dir():
            for p in sorted(q.resolve() for q in path.rglob("*") if q.is_file()):
                out.setdefault(p, role)
    return [(role, path) for path, role in out.items()]


def recipe_files(recipe: ResolvedRecipe) -> list[tuple[str, str | None]]:
    return [(BINARY, engine_program(recipe)), *((role, str(path)) for role, path in model_files(recipe))]


def command_files(command: list[str]) -> list[tuple[str, str | None]]:
    args = [a for a in command[1:] if a.startswith("/") and Path(a).is_file()]
    return [("command program", shutil.which(command[0])), *(("command file", a) for a in args)]


def arm_files(recipe: ResolvedRecipe | None, command: list[str] | None) -> list[tuple[str, str | None]]:
    """(role, path on this host) of every file a start of the arm runs; None where it is not found."""
    return recipe_files(recipe) if recipe is not None else command_files(command or [])


def pins_of_arm(arm: str, recipe: ResolvedRecipe | None, command: list[str] | None) -> list[Pin]:
    """The arm's files that exist here, each with its sha256 (cached per process by path, inode, size, mtime and ctime)."""
    return [
        Pin(arm, role, path, binary_sha256(path))
        for role, path in arm_files(recipe, command)
        if path is not None and Path(path).is_file()
    ]


def check_arm(pins: list[Pin], recipe: ResolvedRecipe | None, arm: str, host: str, by: str) -> str | None:
    """Why a start of ``arm`` cannot run on ``host`` (a pinned file missing or different), else None. The
    engine binary is resolved on this host; ``by`` says who pinned the hashes (``the design registered``)."""
    for p in pins:
        if p.arm != arm:
            continue
        path = (engine_program(recipe) if recipe is not None else None) if p.role == BINARY else p.path
        if path is None or not Path(path).is_file():
            return f"host {host}: {p.role} {path or p.path} is missing ({by} sha256 {p.sha256[:12]}…)"
        got = binary_sha256(path)
        if got != p.sha256:
            return f"host {host}: {p.role} {path} has sha256 {got[:12]}…, {by} {p.sha256[:12]}… ({p.path})"
    return None


def registered(files: dict[str, list[dict[str, str]]]) -> list[Pin]:
    """The pins a frozen design carries (``FrozenDesign.files``)."""
    return [Pin.of(p) for pins in files.values() for p in pins]
