"""Grading: the task's grader is copied next to the workspace only after the agent has stopped, and
runs in the same sandbox (it executes the agent's code). Its exit code is the verdict: 0 pass,
1 fail, anything else — an uncaught exception, a timeout, hidden tests that did not complete — a
grader error, recorded apart from fails and never a pass.

The grader's interpreter cannot be configured from the workspace: it runs ``-I`` (no environment
variables, no user site, neither the cwd — the workspace — nor the script folder prepended to
``sys.path``) and ``-B``; :data:`BOOT` puts only the grader's own folder first on ``sys.path`` and
runs ``grade.py`` as ``__main__``. Agent code never runs in this process: code-task graders run it
in a child (``grader/harness.py``) whose results come back through a private pipe with a nonce.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from frankenstein.agent.sandbox import VIEW_GRADER, Sandbox
from frankenstein.agent.tasks import GRADER_SCRIPT, SKIP_NAMES, Task

PASS, FAIL, ERROR = "pass", "fail", "error"
KEEP_OUTPUT = 2000
CRASHED = 2
# python -I -B -c BOOT GRADE_PY WORKSPACE: an uncaught exception is a grader error (2), not exit 1 (a fail).
BOOT = (
    "import os, runpy, sys, traceback\n"
    "sys.argv = sys.argv[1:]\n"
    "sys.path.insert(0, os.path.dirname(sys.argv[0]))\n"
    "try:\n"
    "    runpy.run_path(sys.argv[0], run_name='__main__')\n"
    "except SystemExit:\n"
    "    raise\n"
    "except BaseException:\n"
    "    traceback.print_exc()\n"
    f"    sys.exit({CRASHED})\n"
)


@dataclass(frozen=True)
class Verdict:
    rc: int | None
    verdict: str
    output: str
    seconds: float
    timed_out: bool

    @property
    def passed(self) -> bool:
        return self.verdict == PASS

    def as_dict(self) -> dict[str, Any]:
        return {
            "rc": self.rc,
            "verdict": self.verdict,
            "output": self.output[-KEEP_OUTPUT:],
            "seconds": round(self.seconds, 3),
            "timed_out": self.timed_out,
        }


def verdict_of(rc: int | None) -> str:
    return PASS if rc == 0 else FAIL if rc == 1 else ERROR


def copy_grader(task: Task, episode_dir: Path) -> Path:
    dest = episode_dir / "grader"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(task.dir / "grader", dest, ignore=shutil.ignore_patterns(*SKIP_NAMES))
    return dest


def grader_argv(script: str, workspace: str) -> list[str]:
    """The command that runs a grader script in an interpreter the workspace cannot configure."""
    return [sys.executable, "-I", "-B", "-c", BOOT, script, workspace]


def grade(task: Task, sandbox: Sandbox, episode_dir: Path) -> Verdict:
    """Copy the grader in and run ``python grade.py WORKSPACE`` (the venv's Python) in the sandbox."""
    grader = copy_grader(task, episode_dir)
    inside = VIEW_GRADER if sandbox.mode != "none" else str(grader)
    binds = [(grader, VIEW_GRADER)] if sandbox.mode != "none" else []
    argv = grader_argv(f"{inside}/{GRADER_SCRIPT}", sandbox.view)
    res = sandbox.run_argv(argv, timeout_s=task.config.grader.timeout_s, binds=binds)
    return Verdict(
        rc=res.rc, verdict=verdict_of(res.rc), output=res.output, seconds=res.seconds, timed_out=res.timed_out
    )
