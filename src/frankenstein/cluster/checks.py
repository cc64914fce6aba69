"""What a host needs is checked, not assumed: the files a start runs, pinned by sha256.

Registration pins, per arm, the files the registered recipe names (:mod:`frankenstein.design.pins`: the engine
binary, the model and draft model files; for a command arm its program and every argument that is an absolute
path to a file) in the frozen design. A design registered before that (no ``frozen.files``) is pinned by the
driver's copies when its run starts, and a resumed run keeps the pins its first recorded start carried
(``resources["pins"]``), so every start of a design is checked against the same files. The worker checks them
before each start on its own host (the engine binary as that host resolves it); a missing or different file is a
failed start that names the host and the file.
"""

from __future__ import annotations

from typing import Any

from frankenstein.design.model import Registered
from frankenstein.design.pins import BINARY, Pin, check_arm, pins_of_arm, registered
from frankenstein.store import StartRow

__all__ = ["BINARY", "Pin", "check", "pin", "pins_of", "recorded_pins"]


def pin(reg: Registered, recorded: list[StartRow]) -> list[Pin]:
    """The pins of every arm: those registration stored; for a design registered without them, those its
    recorded starts carried and the driver's files for the rest."""
    if reg.frozen.files:
        return registered(reg.frozen.files)
    kept = {(p.arm, p.role, p.path): p for p in recorded_pins(recorded)}
    pins = list(kept.values())
    for arm in reg.design.arms:
        for p in pins_of_arm(arm, reg.frozen.recipes[arm], reg.design.arms[arm].command):
            if not any(k[:2] == (arm, p.role) for k in kept):
                pins.append(p)
    return pins


def recorded_pins(rows: list[StartRow]) -> list[Pin]:
    out = []
    for row in rows:
        for p in row.resources.get("pins") or []:
            if isinstance(p, dict) and set(p) == {"arm", "role", "path", "sha256"}:
                out.append(Pin.of(p))
    return out


def check(pins: list[Pin], reg: Registered, arm: str, host: str) -> str | None:
    """Why a start of ``arm`` cannot run on this host (a pinned file missing or different), else None."""
    by = "the design registered" if reg.frozen.files else "the run pinned"
    return check_arm(pins, reg.frozen.recipes[arm], arm, host, by, reg.design.arms[arm].command)


def pins_of(pins: list[Pin], arm: str) -> list[dict[str, Any]]:
    return [p.as_dict() for p in pins if p.arm == arm]
