"""Suite validation (``frank tasks validate DIR``): a task is usable only if its oracle passes k of k,
its untouched workspace fails k of k (a clean fail, exit 1, not a grader error), repeated grader runs
agree (same exit code and same output), the folder stays small on disk, and its seeded workspace fits
its quota (``workspace_mb``).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from frankenstein.agent.grade import Verdict, grade
from frankenstein.agent.sandbox import Isolation, Sandbox, detect_isolation
from frankenstein.agent.tasks import MAX_TASK_BYTES, Task, folder_bytes, make_workspace
from frankenstein.errors import SandboxError


@dataclass
class TaskCheck:
    task_id: str
    hash: str
    size: int
    oracle: list[str] = field(default_factory=list)
    untouched: list[str] = field(default_factory=list)
    agree: bool = True
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _graded(task: Task, root: Path, name: str, oracle: bool, iso: Isolation) -> tuple[Verdict, Verdict]:
    """Grade one fresh workspace twice: the second run checks the grader repeats itself."""
    episode = root / name
    episode.mkdir()
    ws = make_workspace(task, episode / "workspace", oracle=oracle)
    with Sandbox(ws, task.config.sandbox, hide=[task.dir.parent], isolation=iso) as box:
        return grade(task, box, episode), grade(task, box, episode)


def check_task(task: Task, k: int, iso: Isolation | None = None) -> TaskCheck:
    iso = iso or detect_isolation()
    check = TaskCheck(task.id, task.hash[:12], folder_bytes(task.dir))
    if check.size > MAX_TASK_BYTES:
        check.problems.append(f"folder is {check.size} bytes (limit {MAX_TASK_BYTES})")
    with tempfile.TemporaryDirectory(prefix=f"frank-validate-{task.id}-") as d:
        check.problems += _seed_problems(task, Path(d))
        try:
            _runs(task, k, iso, check, Path(d))
        except SandboxError as exc:  # the sandbox refused the task itself (a tmpfs its seed does not fit)
            check.problems.append(f"sandbox: {exc}")
        shutil.rmtree(d, ignore_errors=True)
    if not check.agree:
        check.problems.append("repeated grader runs disagree (exit code or output differ)")
    return check


def _seed_problems(task: Task, root: Path) -> list[str]:
    """A seeded workspace (files and setup script) over the quota could never be worked in, whatever the quota."""
    size = folder_bytes(make_workspace(task, root / "seed" / "workspace"))
    quota = task.config.sandbox.workspace_mb
    return [f"the seeded workspace holds {size} bytes, over its quota of {quota} MB"] if size > quota << 20 else []


def _runs(task: Task, k: int, iso: Isolation, check: TaskCheck, root: Path) -> None:
    for i in range(k):
        for oracle, runs, want in ((True, check.oracle, "pass"), (False, check.untouched, "fail")):
            first, again = _graded(task, root, f"{'oracle' if oracle else 'untouched'}-{i}", oracle, iso)
            runs.append(first.verdict)
            if (first.rc, first.output) != (again.rc, again.output):
                check.agree = False
            if first.verdict != want:
                label = "oracle" if oracle else "untouched workspace"
                said = first.output.strip()[-300:]
                check.problems.append(
                    f"{label} run {i + 1}: {first.verdict} (want {want})" + (f": {said}" if said else "")
                )


def validate(tasks: list[Task], k: int = 3, progress: Callable[[TaskCheck], None] | None = None) -> list[TaskCheck]:
    iso = detect_isolation()
    out = []
    for task in tasks:
        check = check_task(task, k, iso)
        out.append(check)
        if progress is not None:
            progress(check)
    return out


def table(checks: list[TaskCheck], k: int) -> list[str]:
    """Plain-text table lines, one per task, then the problems."""
    rows = [("task", "hash", "size", "oracle", "untouched", "agree", "ok")]
    for c in checks:
        rows.append(
            (
                c.task_id,
                c.hash,
                f"{c.size / 1000:.1f}kB",
                f"{c.oracle.count('pass')}/{k} pass",
                f"{c.untouched.count('fail')}/{k} fail",
                "yes" if c.agree else "NO",
                "ok" if c.ok else "FAIL",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    for c in checks:
        lines += [f"{c.task_id}: {p}" for p in c.problems]
    return lines
