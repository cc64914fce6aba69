"""What a part does to an engine's command-line flags: ``set`` (replace a flag's value, or add it when
absent), ``remove`` (drop the flag and its value), and plain ``args``/``add`` (appended). Pure.

A flag is a token that starts with ``-`` and is not a number. Its value is the next token unless that
token is itself a flag; ``--flag=value`` holds its value inline. An empty value in ``set`` means a flag
that takes no value (``"--no-mmap" = ""``). Spellings are compared exactly: ``-t`` and ``--threads``
are different flags here, because which spellings an engine treats as one is the engine's business;
registration refuses two arms that resolve to the same command line, which is where a forgotten
alias shows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

_NUMBER = re.compile(r"^-\d+(\.\d+)?([eE][-+]?\d+)?$")


def is_flag(token: str) -> bool:
    """``-x``/``--x`` but not ``-1`` or ``-0.5``."""
    return token.startswith("-") and len(token) > 1 and not _NUMBER.match(token)


def _span(args: Sequence[str], i: int) -> int:
    """How many tokens the flag at ``args[i]`` occupies (1, or 2 with a separate value)."""
    if "=" in args[i] or i + 1 >= len(args) or is_flag(args[i + 1]):
        return 1
    return 2


def _name(token: str) -> str:
    return token.partition("=")[0]


def without(args: Sequence[str], flag: str) -> tuple[list[str], int]:
    """``args`` with every occurrence of ``flag`` (and its value) removed; also where the first one stood
    (its index in the result), or -1 when it was absent."""
    out: list[str] = []
    first = -1
    i = 0
    while i < len(args):
        if is_flag(args[i]) and _name(args[i]) == flag:
            first = len(out) if first < 0 else first
            i += _span(args, i)
            continue
        out.append(args[i])
        i += 1
    return out, first


def set_flag(args: Sequence[str], flag: str, value: str) -> list[str]:
    """One occurrence of ``flag`` with ``value``, where its first occurrence stood, or appended."""
    rest, at = without(args, flag)
    tokens = [flag] if value == "" else [flag, value]
    at = len(rest) if at < 0 else at
    return [*rest[:at], *tokens, *rest[at:]]


def apply_part(args: Sequence[str], remove: Sequence[str], set_: Mapping[str, str], add: Sequence[str]) -> list[str]:
    """A part's changes in a fixed order: remove, then set, then append."""
    out = list(args)
    for flag in remove:
        out, _ = without(out, flag)
    for flag, value in set_.items():
        out = set_flag(out, flag, value)
    return [*out, *add]


def repeated_flags(args: Sequence[str]) -> list[str]:
    """Flags that occur more than once in ``args`` (an engine keeps one of them, which one is its own rule)."""
    seen: dict[str, int] = {}
    for token in args:
        if is_flag(token):
            seen[_name(token)] = seen.get(_name(token), 0) + 1
    return [f for f, n in seen.items() if n > 1]
