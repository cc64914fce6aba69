"""Files shipped inside the package (tiny models, demo workload), addressed as ``pkg:NAME``."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

PKG_PREFIX = "pkg:"


def data_path(name: str) -> Path:
    """Absolute path of a file in ``frankenstein/data``."""
    return Path(str(resources.files("frankenstein") / "data" / name))


def expand(value: str) -> str:
    """``pkg:tiny-target.gguf`` → the shipped file's path; anything else unchanged."""
    if value.startswith(PKG_PREFIX):
        return str(data_path(value[len(PKG_PREFIX) :]))
    return value
