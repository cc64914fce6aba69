"""Every command's help has an example (sqlite-utils' test_docs habit)."""

from __future__ import annotations

import typer.main

from frankenstein.cli import app


def _commands(group, prefix=()):  # type: ignore[no-untyped-def]
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):
            yield from _commands(cmd, (*prefix, name))
        else:
            yield (*prefix, name), cmd


def test_every_command_has_an_example() -> None:
    root = typer.main.get_command(app)
    found = dict(_commands(root))
    assert len(found) >= 20
    missing = [" ".join(n) for n, c in found.items() if "Example:" not in (c.help or "")]
    assert missing == []
