"""The first process of a command arm (or an engine): it starts the command and, whatever happens, takes
down every process the command started before it exits.

A parent-death signal only reaches the direct child, and it is cleared in every process that child
forks, so a command arm's own children (a benchmark's workers, a ``sleep &``) would outlive a
``kill -9`` of ``frank``. This guard is the direct child: it asks for ``SIGTERM`` on its parent's
death, and it is a *child subreaper* (``PR_SET_CHILD_SUBREAPER``): a descendant whose parent exits is
re-parented to the guard, not to init, so every process the command started stays in the guard's tree,
including one that left the process group with ``setsid`` and double-forked. On SIGTERM, SIGHUP or
SIGINT, and when the command exits, the guard SIGKILLs its whole tree (read from ``/proc``, again until
nothing is left) and its process group, reaps them, and exits.

A guard can itself be SIGKILLed without notice: a Ray worker that exits kills its direct children
(Ray's ``kill_child_processes_on_worker_exit``), and that child is the guard. So the guard forks a
*watcher* first, a second member of the group whose parent-death signal points at the guard: when the
guard dies by any signal, the watcher gets SIGTERM and SIGKILLs the group (a ``setsid`` descendant is then
re-parented to the next subreaper or init: that one case is the group's reach only).

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
import time
from types import FrameType

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
KILL_ROUNDS_S = 10.0  # how long the guard keeps killing a tree that keeps forking


def _prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(option, value)
    except OSError:
        pass


def _parents() -> dict[int, int]:
    """pid -> parent pid of every live (non-zombie) process, from /proc."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != b"Z":
            out[int(name)] = int(fields[1])
    return out


def descendants(root: int) -> list[int]:
    """Every live process below ``root`` in the process tree."""
    children: dict[int, list[int]] = {}
    for pid, ppid in _parents().items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def _reap_children() -> None:
    """Collect every exited child (ours, or a descendant re-parented to us), without waiting."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_tree() -> None:
    """SIGKILL every descendant and the group, again until none is left (a forking tree is caught on a
    later round: a killed process cannot fork), and reap them."""
    me, end = os.getpid(), time.monotonic() + KILL_ROUNDS_S
    while True:
        left = descendants(me)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _reap_children()
        if not left or time.monotonic() > end:
            return
        time.sleep(0.005)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    kill_tree()
    os.killpg(os.getpgid(0), signal.SIGKILL)  # the guard is in the group too: nothing is left


def _watch(guard: int) -> None:
    """Fork the watcher: it waits for the guard's death (its parent-death signal) and kills the group."""
    if os.fork() != 0:
        return
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _kill_group)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != guard:  # the guard died before the signal was armed
        _kill_group(signal.SIGTERM, None)
    while True:
        signal.pause()


def _kill_group(signum: int, frame: FrameType | None) -> None:
    os.killpg(os.getpgid(0), signal.SIGKILL)


def main(argv: list[str]) -> int:
    parent, cmd = int(argv[0]), argv[2:]
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _on_signal)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    if os.getppid() != parent:  # frank died before the parent-death signal was armed
        return 1
    _watch(os.getpid())
    try:
        child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
    except OSError as exc:
        print(f"cannot execute {cmd[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        kill_tree()
        return 127
    code = child.wait()
    kill_tree()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
