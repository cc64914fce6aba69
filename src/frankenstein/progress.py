"""Progress on stderr, for humans and for logs; stdout stays for results (and ``--json``).

- On a terminal (stderr is a TTY): rich progress bars with elapsed time and ETA, removed when done.
- Not on a terminal (a log file, CI, a pipe): plain lines, flushed as they are written. ``frank run`` (and
  ``frank replay``, one start) writes one line as each start begins and one as it ends, and a heartbeat
  line every ``heartbeat_s`` seconds (``--heartbeat``, else ``$FRANK_HEARTBEAT_S``, else 30) while a start
  runs, each with an ETA from the pace of the starts done so far (an upper bound when a design curtails).

    RunProgress(total, heartbeat_s=...)   the progress of ``frank run`` (``.slot(label)`` is the runner's
                                          progress_factory) and of ``frank replay`` (one slot)
    heartbeat_seconds(option, env)        the heartbeat interval from the option or the environment

``frank run --ray`` has no start begin locally: its driver calls ``note`` (a block sent, the host it runs
on), ``recorded`` as each start comes back, and runs inside ``heartbeat(status)`` (blocks in flight).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:  # rich is imported only when bars are drawn (a terminal): off one, ``frank run`` skips ~30 ms
    from rich.progress import Progress, TaskID

HEARTBEAT_ENV = "FRANK_HEARTBEAT_S"
DEFAULT_HEARTBEAT_S = 30.0

Update = Callable[[int, int], None]


def heartbeat_seconds(option: float | None, env: Mapping[str, str] = os.environ) -> float:
    """The option if given, else ``$FRANK_HEARTBEAT_S``, else 30; must be a positive number."""
    if option is not None:
        value, source = option, "--heartbeat"
    elif env.get(HEARTBEAT_ENV):
        source = HEARTBEAT_ENV
        try:
            value = float(env[HEARTBEAT_ENV])
        except ValueError:
            raise ValueError(f"{HEARTBEAT_ENV}={env[HEARTBEAT_ENV]!r} is not a number of seconds") from None
    else:
        return DEFAULT_HEARTBEAT_S
    if not (value > 0 and value < float("inf")):
        raise ValueError(f"{source}: {value} is not a positive number of seconds")
    return value


def duration(seconds: float) -> str:
    """'0.4 s', '42 s', '3 min 5 s', '1 h 2 min'."""
    if seconds < 9.95:
        return f"{max(seconds, 0.0):.1f} s"
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


class RunProgress:
    """The progress of one ``frank run`` over ``total`` starts: bars on a terminal, plain lines otherwise.

    ``slot(label)`` is the runner's ``progress_factory``: entered as a start begins, left as it ends; it
    yields the start's ``update(done, total)`` for its turns. Slots may run in parallel (each gets its own
    number and heartbeat). The ETA projects the run's pace so far: the time from the run's begin to the
    last finished start, per finished start, times ``total``, less the time already gone (so parallel
    starts shorten it, and a heartbeat's ETA counts down)."""

    def __init__(
        self,
        total: int,
        *,
        heartbeat_s: float = DEFAULT_HEARTBEAT_S,
        stream: TextIO | None = None,
        tty: bool | None = None,
        prefix: str = "frank run",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.heartbeat_s = heartbeat_s
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.prefix = prefix
        self.clock = clock
        self.began = clock()
        self.started = 0
        self.finished = 0
        self._last_finish = self.began
        self._lock = threading.Lock()
        self._bars: Progress | None = None
        self._overall: TaskID | None = None

    def __enter__(self) -> RunProgress:
        self.began = self._last_finish = self.clock()
        if self.tty:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            # stdout lines go above the bars only when stdout is the terminal too; redirected, it stays stdout
            self._bars = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=Console(file=self.stream, force_terminal=True),
                transient=True,
                redirect_stdout=sys.stdout.isatty(),
                redirect_stderr=False,
            )
            self._bars.__enter__()
            self._overall = self._bars.add_task("starts", total=self.total)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._bars is not None:
            self._bars.__exit__(kind, exc, tb)
            self._bars = None
        elif self.finished:
            self._line(f"{self.finished} start(s) in {duration(self.clock() - self.began)}")

    # ------------------------------------------------------------ ETA

    def eta(self) -> str:
        """'ETA 3 min 5 s' from the pace of the finished starts; 'ETA after the first start' before one."""
        with self._lock:
            finished, last = self.finished, self._last_finish
        if not finished:
            return "ETA after the first start"
        per = (last - self.began) / finished
        return f"ETA {duration(max(self.began + per * self.total - self.clock(), 0.0))}"

    def _begin(self) -> int:
        with self._lock:
            self.started += 1
            return self.started

    def _end(self) -> None:
        with self._lock:
            self.finished += 1
            self._last_finish = self.clock()

    # ------------------------------------------------------------ one start

    @contextmanager
    def slot(self, label: str) -> Iterator[Update]:
        index = self._begin()
        t0 = self.clock()
        turns: list[int] = [0, 0]
        if self._bars is not None:
            task = self._bars.add_task(label, total=None)
            bars = self._bars

            def update(done: int, total: int) -> None:
                bars.update(task, completed=done, total=total)

            try:
                yield update
            finally:
                self._end()
                bars.remove_task(task)
                if self._overall is not None:
                    bars.advance(self._overall)
            return

        def count(done: int, total: int) -> None:
            turns[:] = [done, total]

        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(self.heartbeat_s):
                where = f", turn {turns[0]}/{turns[1]}" if turns[1] else ""
                self._line(
                    f"start {index}/{self.total} running for {duration(self.clock() - t0)}: {label}{where}; "
                    f"{self.eta()}"
                )

        self._line(f"start {index}/{self.total} begins: {label}")
        beater = threading.Thread(target=beat, name="frank-heartbeat", daemon=True)
        beater.start()
        interrupted = False
        try:
            yield count
        except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP (cli turns them into this): nothing is recorded
            interrupted = True
            raise
        finally:
            stop.set()
            beater.join()
            self._end()
            took = duration(self.clock() - t0)
            if interrupted:
                self._line(
                    f"start {index}/{self.total} discarded after {took} (interrupted; not recorded, "
                    f"`frank run --resume` runs it again): {label}"
                )
            else:
                left = self.total - self.finished
                tail = f"; {left} to go, {self.eta()}" if left > 0 else ""
                self._line(f"start {index}/{self.total} ends after {took}: {label}{tail}")

    # ------------------------------------------------------------ starts run elsewhere (a Ray cluster)

    def note(self, text: str) -> None:
        """One line about the run (a block sent to a host, a host that reported), above the bars on a terminal."""
        if self._bars is not None:
            self._bars.console.print(f"{self.prefix} {text}", markup=False, highlight=False)
        else:
            self._line(text)

    def recorded(self, label: str) -> None:
        """A start that ran elsewhere came back and was recorded (``frank run --ray``)."""
        self._end()
        if self._bars is not None:
            if self._overall is not None:
                self._bars.advance(self._overall)
            return
        left = self.total - self.finished
        tail = f"; {left} to go, {self.eta()}" if left > 0 else ""
        self._line(f"start {self.finished}/{self.total} recorded: {label}{tail}")

    @contextmanager
    def heartbeat(self, status: Callable[[], str]) -> Iterator[None]:
        """Off a terminal, a line every ``heartbeat_s`` seconds with ``status()`` and the ETA, while inside."""
        if self._bars is not None:
            yield
            return
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(self.heartbeat_s):
                self._line(f"{status()}; {self.eta()}")

        beater = threading.Thread(target=beat, name="frank-heartbeat", daemon=True)
        beater.start()
        try:
            yield
        finally:
            stop.set()
            beater.join()

    def _line(self, text: str) -> None:
        e = int(self.clock() - self.began)
        stamp = f"{e // 3600}:{e % 3600 // 60:02d}:{e % 60:02d}"
        with self._lock:
            self.stream.write(f"{self.prefix} [{stamp}] {text}\n")
            self.stream.flush()
