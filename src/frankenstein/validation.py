"""One validation base for every file a user writes (``frank.toml``, designs, traces, tasks).

    UserFile          pydantic base with ``extra="forbid"``: an unknown field is an error, never ignored;
                      a boolean where a number belongs is an error, never 1 or 0
    FrozenUserFile    the same, immutable (recipes and parts are hashed into designs)
    field_error(path, exc, error_cls)   the one formatter: the file, the first bad field, what is wrong
    read_toml(path, error_cls)          a TOML file as a dict, or one error naming the file
    read_text(path, error_cls)          a UTF-8 file's text; missing, a directory or not UTF-8 is one error
    http_root(url, tls)                 (host, port) of http://HOST:PORT (https:// too with ``tls``), else
                                        ValueError saying what is wrong

Every loader validates with these, so bad input reads the same everywhere:
``frank.toml: recipes.base.engine: Input should be 'llamacpp', ...``.
"""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from frankenstein.errors import ConfigError


def takes_number(annotation: object) -> bool:
    """Whether a field of this type takes a number and no boolean: ``int`` or ``float``, alone or in a union
    without ``bool`` (pydantic reads ``true`` as 1 for them)."""
    args = get_args(annotation) if get_origin(annotation) in (Union, UnionType) else (annotation,)
    return bool not in args and any(a in (int, float) for a in args)


@cache
def number_fields(model: type[BaseModel]) -> frozenset[str]:
    """The names (and aliases) of ``model``'s fields that take a number and no boolean."""
    fields = model.model_fields.items()
    return frozenset(n for name, f in fields if takes_number(f.annotation) for n in (name, f.alias) if n)


class _UserModel(BaseModel):
    @model_validator(mode="before")
    @classmethod
    def _no_boolean_numbers(cls, data: Any) -> Any:
        """A boolean where a number belongs is refused, naming the field (``blocks = true`` was read as 1)."""
        if isinstance(data, dict):
            for name in number_fields(cls) & data.keys():
                if isinstance(data[name], bool):
                    why = f"{str(data[name]).lower()} is a boolean, not a number"
                    raise PydanticCustomError("bool_number", "{field}: {why}", {"field": name, "why": why})
        return data


class UserFile(_UserModel):
    """Base of every model of a user-written file."""

    model_config = ConfigDict(extra="forbid")


class FrozenUserFile(_UserModel):
    """A user-file model that cannot change after validation."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def field_error(
    path: object, exc: ValidationError, error_cls: type[ConfigError] = ConfigError, prefix: str = ""
) -> ConfigError:
    """One message naming the file and the first bad field (``prefix`` is prepended to the field, e.g. a line)."""
    err = exc.errors()[0]
    ctx = err.get("ctx") or {}
    loc = [str(p) for p in err["loc"]]
    msg = "unknown field" if err["type"] == "extra_forbidden" else str(err["msg"]).removeprefix("Value error, ")
    if "why" in ctx:  # a whole-model check names its own field: PydanticCustomError(..., {"field", "why"})
        loc, msg = [*loc, str(ctx["field"])] if ctx.get("field") else loc, str(ctx["why"])
    field = ".".join(loc) or "(top level)"
    return error_cls(msg, path=path, field=prefix + field)


def read_toml(path: str | Path, error_cls: type[ConfigError] = ConfigError) -> dict[str, Any]:
    """The parsed TOML of ``path``; a missing or malformed file is one ``error_cls`` naming it."""
    path = Path(path)
    text = read_text(path, error_cls)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error_cls(f"not valid TOML: {exc}", path=path) from exc
    except RecursionError as exc:
        raise error_cls("nested too deeply to read", path=path) from exc


def read_text(path: str | Path, error_cls: type[ConfigError] = ConfigError) -> str:
    """The UTF-8 text of a file the user named; missing, a directory, unreadable or not UTF-8 is one
    ``error_cls`` naming the file (with the line of the first bad byte)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise error_cls("file not found", path=path) from exc
    except IsADirectoryError as exc:
        raise error_cls("is a directory, not a file", path=path) from exc
    except OSError as exc:
        raise error_cls(f"cannot read: {exc.strerror or exc}", path=path) from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise error_cls(f"not UTF-8 text (byte 0x{data[exc.start]:02x} at line {line})", path=path) from exc


def listen_address(value: str) -> tuple[str, int]:
    """(host, port) of a listen address, ``HOST:PORT`` or ``PORT`` (host 127.0.0.1), a port from 0 to 65535;
    anything else is a ValueError naming the value (the one parser of ``--listen``)."""
    host, _, port = value.strip().rpartition(":")
    if not (port.isascii() and port.isdigit()) or not 0 <= int(port) <= 65535:
        raise ValueError(f"{value!r}: expected HOST:PORT with a port from 0 to 65535")
    return host or "127.0.0.1", int(port)


def http_root(url: str, tls: bool = False) -> tuple[str, int]:
    """(host, port) of a server's root, ``http://HOST:PORT``; anything else is a ValueError saying what is
    wrong. ``tls``: ``https://HOST:PORT`` too (``frank serve --upstream``: the proxies' upstream client and
    :mod:`frankenstein.engines.http` speak TLS); elsewhere only plain http (engines frank starts or replays)."""
    parts = urlsplit(url.strip())
    schemes = ("http", "https") if tls else ("http",)
    if parts.scheme not in schemes or not parts.hostname:
        wanted = "http://HOST:PORT or https://HOST:PORT" if tls else "http://HOST:PORT (only plain http is supported)"
        raise ValueError(f"{url!r}: expected {wanted}")
    if parts.path.strip("/") or parts.query:
        raise ValueError(f"{url!r}: give the server's root, without a path ({parts.scheme}://HOST:PORT)")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise ValueError(f"{url!r}: the port is not a number") from exc
    return parts.hostname, port
