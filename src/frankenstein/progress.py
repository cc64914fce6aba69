"""Progress bars on stderr for long replays and runs (silent when stderr is not a terminal)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


@contextmanager
def bar(description: str) -> Iterator[Callable[[int, int], None]]:
    """Yield ``update(done, total)``; a no-op bar when stderr is not a TTY."""
    if not sys.stderr.isatty():
        yield lambda done, total: None
        return
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as p:
        task = p.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            p.update(task, completed=done, total=total)

        yield update
