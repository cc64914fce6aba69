"""A command arm's process life: reaped like an engine.

A command arm is a program that prints its metrics as one JSON object on its last stdout line. It
runs under :mod:`frankenstein.design.command_guard` in its own process group, with the guard holding
a parent-death signal, and a pid file in the engines' runtime directory
(:func:`frankenstein.engines.process.reap_leftovers` also clears it). So:

- when the command exits (or times out, or ``frank`` is interrupted: the guard gets SIGTERM), the guard
  SIGKILLs every process below it, and frank then SIGKILLs the group and waits for it: a child the
  command left running never outlives the start, nor does one that called ``setsid`` (the guard is a
  child subreaper, so such a child stays in its tree);
- after ``kill -9`` of ``frank`` the guard gets SIGTERM from the kernel and does the same.

stdout and stderr go to files under the campaign's ``logs/`` (kept), not pipes: a background child
holding a pipe open can never make ``frank`` wait for it.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from frankenstein.design import command_guard
from frankenstein.design.start import StartOutcome
from frankenstein.engines import command_recipe
from frankenstein.engines.process import (
    TOKEN_VAR,
    engine_env,
    extra_env,
    kill_token,
    new_token,
    wait_group_gone,
    write_pid_file,
)
from frankenstein.measure.memory import RssSampler
from frankenstein.store import now_iso

COMMAND_TIMEOUT_S = 3600.0
GUARD_STOP_S = 15.0  # the guard's kill rounds (command_guard.KILL_ROUNDS_S) and a margin


def run_command_arm(
    command: list[str], log_dir: Path, timeout_s: float = COMMAND_TIMEOUT_S, *, rss: bool = False
) -> StartOutcome:
    """Run a command arm once; an ``ok`` start carries the numbers of its last stdout line. ``rss``: also
    sample the peak RSS of the command's process tree, the guard left out (``resources["rss"]``)."""
    recipe = command_recipe(command)
    out = StartOutcome(status="failed", reason=None, started_at=now_iso(), recipe=recipe, engine="command")
    log_dir.mkdir(parents=True, exist_ok=True)
    stem = log_dir / f"command-{os.getpid()}-{time.time_ns()}"
    stdout_path, stderr_path = stem.with_suffix(".out"), stem.with_suffix(".err")
    sampler = RssSampler() if rss else None
    try:
        code = run_guarded(command, stdout_path, stderr_path, timeout_s, sampler)
    except OSError as exc:
        out.reason = f"command failed: {exc}"
        return out
    except subprocess.TimeoutExpired:
        out.reason = f"command did not finish within {timeout_s:.0f} s (killed with its children)"
        return out
    finally:
        if sampler is not None:
            out.resources["rss"] = sampler.stop()
    stdout = stdout_path.read_text(errors="replace").strip()
    if code != 0:
        out.reason = f"command exited {code}: {stderr_path.read_text(errors='replace').strip()[-300:]}"
        return out
    try:
        out.metrics = arm_metrics(stdout)
    except ValueError as exc:
        out.reason = f"command printed no JSON object of numbers on its last line ({exc}): {stdout[-200:]!r}"
        return out
    out.status = "ok"
    return out


def arm_metrics(stdout: str) -> dict[str, float]:
    """The metrics of a command arm's last stdout line: a JSON object whose every value is a finite number.
    A boolean is not a number (``true`` would read as 1.0), and neither is ``Infinity`` or ``NaN``, which
    Python's JSON reader accepts: each is a ValueError naming the metric."""
    lines = stdout.splitlines()
    parsed = json.loads(lines[-1]) if lines else None
    if not isinstance(parsed, dict) or not parsed:
        raise ValueError("the last line is not a JSON object with at least one metric")
    metrics = {}
    for name, value in parsed.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{name} is {json.dumps(value)[:40]}, not a number")
        number = float(value) if isinstance(value, float) or abs(value) < 2**1023 else math.inf
        if not math.isfinite(number):
            raise ValueError(f"{name} is {str(value)[:40]}, not a finite number")
        metrics[name] = number
    return metrics


def run_guarded(
    command: list[str], stdout_path: Path, stderr_path: Path, timeout_s: float, sampler: RssSampler | None = None
) -> int:
    """Start ``command`` under the guard in a new process group, wait up to ``timeout_s``, then kill
    and reap the whole group whatever happened (exit, timeout, KeyboardInterrupt). Returns the exit code."""
    argv = [sys.executable, "-I", command_guard.__file__, str(os.getpid()), "--", *command]
    token = new_token()  # a second line: a process that left the guard's tree still holds it (engines/process.py)
    with open(stdout_path, "wb") as so, open(stderr_path, "wb") as se:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=so,
            stderr=se,
            env={**engine_env(), **extra_env(), TOKEN_VAR: token},  # + the arm's cache folders (design/caches.py)
            start_new_session=True,
            preexec_fn=_parent_death(signal.SIGTERM),
        )
    if sampler is not None:
        sampler.start(proc.pid, skip=Path(command_guard.__file__).name)  # the guard and its watcher left out
    pidfile = write_pid_file(proc.pid, command, token)
    try:
        return proc.wait(timeout=timeout_s)
    finally:
        stop_guard(proc)
        kill_token(token)
        pidfile.unlink(missing_ok=True)


def stop_guard(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the guard, which kills every process below it (``setsid`` ones included) and its group;
    then SIGKILL to the group for anything left, and wait until it is empty."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=GUARD_STOP_S)
        except subprocess.TimeoutExpired:
            pass
    _kill_group(proc.pid)
    proc.wait()
    wait_group_gone(proc.pid)


def _parent_death(sig: int) -> Callable[[], None]:
    """preexec: ask the kernel for ``sig`` when frank dies (the guard then kills the group)."""

    def setup() -> None:
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(command_guard.PR_SET_PDEATHSIG, sig)
        except OSError:
            pass

    return setup


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
