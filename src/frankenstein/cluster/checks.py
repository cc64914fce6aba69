"""What a host needs is checked, not assumed: the files a start runs, pinned by sha256.

The driver pins, per arm, the files the registered recipe names — the engine binary (``llama-server``
as the engine would find it, or a recipe command's program), the model file and draft model files; for
a command arm its program and every argument that is an absolute path to a file — with the sha256 of the
driver's copy. A resumed run keeps the pins its first recorded start carried (``resources["pins"]``), so
every start of a design is checked against the same files. The worker checks them before each start on
its own host (the engine binary as that host resolves it); a missing or different file is a failed start
that names the host and the file.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from frankenstein.config import ResolvedRecipe, draft_model_args
from frankenstein.design.model import Registered
from frankenstein.engines.llamacpp import find_llama_server
from frankenstein.errors import EngineError
from frankenstein.measure.machine import binary_sha256
from frankenstein.shipped import expand
from frankenstein.store import StartRow

BINARY = "engine binary"


@dataclass(frozen=True)
class Pin:
    arm: str
    role: str  # engine binary | model | draft model | command program | command file
    path: str  # the driver's path (a worker resolves the engine binary itself)
    sha256: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


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


def recipe_files(recipe: ResolvedRecipe) -> list[tuple[str, str | None]]:
    files: list[tuple[str, str | None]] = [(BINARY, engine_program(recipe))]
    if recipe.model and Path(recipe.model).is_file():
        files.append(("model", recipe.model))
    files += [("draft model", expand(value)) for _, value in draft_model_args(recipe.args) if value]
    return files


def command_files(command: list[str]) -> list[tuple[str, str | None]]:
    args = [a for a in command[1:] if a.startswith("/") and Path(a).is_file()]
    return [("command program", shutil.which(command[0])), *(("command file", a) for a in args)]


def arm_files(reg: Registered, arm: str) -> list[tuple[str, str | None]]:
    """(role, path on this host) of every file a start of ``arm`` runs; None where it is not found."""
    recipe = reg.frozen.recipes[arm]
    if recipe is None:
        return command_files(reg.design.arms[arm].command or [])
    return recipe_files(recipe)


def pin(reg: Registered, recorded: list[StartRow]) -> list[Pin]:
    """The pins of every arm: those the design's recorded starts carried, the driver's files for the rest."""
    kept = {(p.arm, p.role, p.path): p for p in recorded_pins(recorded)}
    pins = list(kept.values())
    for arm in reg.design.arms:
        for role, path in arm_files(reg, arm):
            if path is not None and Path(path).is_file() and not any(k[:2] == (arm, role) for k in kept):
                pins.append(Pin(arm, role, path, binary_sha256(path)))
    return pins


def recorded_pins(rows: list[StartRow]) -> list[Pin]:
    out = []
    for row in rows:
        for p in row.resources.get("pins") or []:
            if isinstance(p, dict) and set(p) == {"arm", "role", "path", "sha256"}:
                out.append(Pin(**{k: str(v) for k, v in p.items()}))
    return out


def check(pins: list[Pin], reg: Registered, arm: str, host: str) -> str | None:
    """Why a start of ``arm`` cannot run on this host (a pinned file missing or different), else None."""
    recipe = reg.frozen.recipes[arm]
    for p in pins:
        if p.arm != arm:
            continue
        path = (engine_program(recipe) if recipe is not None else None) if p.role == BINARY else p.path
        if path is None or not Path(path).is_file():
            return f"host {host}: {p.role} {path or p.path} is missing (the run pinned sha256 {p.sha256[:12]}…)"
        got = binary_sha256(path)
        if got != p.sha256:
            return f"host {host}: {p.role} {path} has sha256 {got[:12]}…, the run pinned {p.sha256[:12]}… ({p.path})"
    return None


def pins_of(pins: list[Pin], arm: str) -> list[dict[str, Any]]:
    return [p.as_dict() for p in pins if p.arm == arm]
