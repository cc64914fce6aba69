"""Files shipped inside the package (tiny models, demo workload), addressed as ``pkg:NAME``."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from frankenstein.errors import ConfigError

PKG_PREFIX = "pkg:"


def data_path(name: str) -> Path:
    """Absolute path of a file in ``frankenstein/data``; a name that leaves that folder is refused."""
    root = Path(str(resources.files("frankenstein") / "data")).resolve()
    path = (root / name).resolve()
    if not path.is_relative_to(root) or path == root:
        raise ConfigError(f"{PKG_PREFIX}{name}: names no file inside the package's data folder")
    return path


def expand(value: str) -> str:
    """``pkg:tiny-target.gguf`` → the shipped file's path; anything else unchanged."""
    if value.startswith(PKG_PREFIX):
        return str(data_path(value[len(PKG_PREFIX) :]))
    return value
