"""The first process of a command arm: it starts the command in its own process group and takes
that whole group down when ``frank`` dies.

A parent-death signal only reaches the direct child, and it is cleared in every process that child
forks, so a command arm's own children (a benchmark's workers, a ``sleep &``) would outlive a
``kill -9`` of ``frank``. This guard is the direct child: it asks for ``SIGTERM`` on its parent's
death, and on that signal (or SIGHUP/SIGINT) it SIGKILLs its process group, which holds the command
and everything the command started (unless a descendant left the group with ``setsid``).

A guard can itself be SIGKILLed without notice: a Ray worker that exits kills its direct children
(Ray's ``kill_child_processes_on_worker_exit``), and that child is the guard. So the guard forks a
*watcher* first, a second member of the group whose parent-death signal points at the guard: when the
guard dies by any signal, the watcher gets SIGTERM and SIGKILLs the group.

Run as a script with the standard library only (``python -I command_guard.py PARENT_PID -- CMD...``),
so it starts in a few tens of milliseconds and imports nothing of ours. Exit status: the command's,
or 127 when the command cannot be executed (the reason on stderr).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from types import FrameType

PR_SET_PDEATHSIG = 1


def _kill_group(signum: int, frame: FrameType | None) -> None:
    os.killpg(os.getpgid(0), signal.SIGKILL)  # the guard is in the group too: nothing is left


def _watch(guard: int) -> None:
    """Fork the watcher: it waits for the guard's death (its parent-death signal) and kills the group."""
    if os.fork() != 0:
        return
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass
    if os.getppid() != guard:  # the guard died before the signal was armed
        _kill_group(signal.SIGTERM, None)
    while True:
        signal.pause()


def main(argv: list[str]) -> int:
    parent, cmd = int(argv[0]), argv[2:]
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _kill_group)
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass
    if os.getppid() != parent:  # frank died before the parent-death signal was armed
        return 1
    _watch(os.getpid())
    try:
        child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
    except OSError as exc:
        print(f"cannot execute {cmd[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
