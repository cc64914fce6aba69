"""Forging the grader: every trick an agent could leave in its workspace to turn an untouched
workspace into a pass, tried on every shipped task through the real grading path (the task's grader
in the sandbox). None may pass. Each trick is first shown to be live: it fires in a plain
interpreter configured the way the old harness was (``PYTHONPATH=workspace``, ``HOME=workspace``),
so these tests would fail if the grader honoured it. And the oracle, carrying every startup trick,
still passes: the grader still grades.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from frankenstein.agent.grade import Verdict, grade
from frankenstein.agent.sandbox import Isolation, Sandbox, detect_isolation
from frankenstein.agent.tasks import Task, load_suite, make_workspace, shipped_suite

SUITE = shipped_suite()
TASKS = {t.id: t for t in load_suite(SUITE)}
NS = detect_isolation()
NONE = Isolation("none", ("forced by the test",))
MARK = "FORGERY-FIRED"
FAKE = 'FRANK-RESULTS [["test_forged", true, ""]]'
# What a forger runs: a fake results line on stdout and stderr, then a clean exit before any test.
PAYLOAD = (
    f"import os, sys\nsys.stdout.write('\\n{FAKE}\\n{MARK}\\n'); sys.stdout.flush()\n"
    f"sys.stderr.write('\\n{FAKE}\\n'); sys.stderr.flush()\nos._exit(0)\n"
)
PTH_LINE = f"import os, sys; sys.stdout.write('\\n{FAKE}\\n{MARK}\\n'); sys.stdout.flush(); os._exit(0)\n"
USER_SITE = f".local/lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
# Where each code task's hidden tests import from (their root) and the module they import first.
CODE = {
    "fix-ledger-month": ("", "ledger/__init__.py"),
    "regression-csvstats": ("v2", "v2/csvstats/__init__.py"),
    "spec-durations": ("", "durations.py"),
    "todo-feature": ("", "todo/__init__.py"),
}


@dataclass(frozen=True)
class Trick:
    """Files added to an untouched workspace (path -> text; ``{root}`` is the import root), an
    environment leaked into the grader's sandbox (``{view}`` is the workspace as the grader sees
    it), and how to show the trick is live in a plain interpreter."""

    name: str
    files: dict[str, str]
    env: dict[str, str] = field(default_factory=dict)
    live: Callable[[Path, Path], list[str]] | None = None  # (workspace, root) -> argv run with HOME, PYTHONPATH
    prepend: str = ""  # code put at the top of the task's first imported module (code tasks)
    exits_early: bool = False  # the trick ends the test process before it reports

    def apply(self, task: Task, ws: Path, view: str) -> dict[str, str]:
        root = CODE.get(task.id, ("", ""))[0]
        for rel, text in self.files.items():
            path = ws / rel.format(root=root).lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        if self.prepend and task.id in CODE:
            module = ws / CODE[task.id][1]
            module.write_text(self.prepend + module.read_text())
        return {k: v.format(view=view, root=root) for k, v in self.env.items()}


def _py(code: str, python: str = sys.executable) -> Callable[[Path, Path], list[str]]:
    return lambda ws, root: [python, "-c", code]


# A venv turns the user site off; the interpreter under it (frank installed without a venv) has it on.
BASE_PY = os.path.realpath(sys.executable)


STDLIB_SHADOWS = [
    "json.py",
    "datetime.py",
    "subprocess.py",
    "tempfile.py",
    "traceback.py",
    "ast.py",
    "secrets.py",
    "shutil.py",
    "importlib/__init__.py",
    "ctypes/__init__.py",
]
TRICKS = [
    Trick(
        "sitecustomize",
        {"{root}/sitecustomize.py": PAYLOAD, f"{USER_SITE}/sitecustomize.py": PAYLOAD},
        live=_py("pass"),
    ),
    Trick(
        "usercustomize",
        {"{root}/usercustomize.py": PAYLOAD, f"{USER_SITE}/usercustomize.py": PAYLOAD},
        live=_py("pass", BASE_PY),
    ),
    Trick("pth-file", {"{root}/forge.pth": PTH_LINE, f"{USER_SITE}/forge.pth": PTH_LINE}, live=_py("pass", BASE_PY)),
    Trick(
        "conftest",
        {"{root}/conftest.py": PAYLOAD, "{root}/tests/conftest.py": PAYLOAD, "conftest.py": PAYLOAD},
        live=lambda ws, root: [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", str(root)],
    ),
    Trick(
        "pythonstartup",
        {".pythonstartup.py": PAYLOAD},
        env={"PYTHONSTARTUP": "{view}/.pythonstartup.py", "PYTHONINSPECT": "1"},
        live=lambda ws, root: [sys.executable, "-i"],
    ),
    Trick(
        "leaked-env",
        {"{root}/sitecustomize.py": PAYLOAD},
        env={"PYTHONPATH": "{view}/{root}", "PYTHONUSERBASE": "{view}/.local"},
        live=_py("pass"),
    ),
    Trick("stdlib-shadow", {f"{{root}}/{name}": PAYLOAD for name in STDLIB_SHADOWS}, live=_py("import json")),
    Trick(
        "unittest-pytest",
        {"{root}/unittest/__init__.py": PAYLOAD, "{root}/pytest.py": PAYLOAD, "{root}/_pytest/__init__.py": PAYLOAD},
        live=_py("import unittest"),
    ),
    Trick(
        "fake-line-stdout",
        {},
        prepend=f"import atexit\nprint('\\n{FAKE}\\n{MARK}')\natexit.register(print, '\\n{FAKE}')\n",
    ),
    Trick(
        "fake-line-stderr",
        {},
        prepend=f"import atexit, sys\nprint('\\n{FAKE}', file=sys.stderr)\n"
        f"atexit.register(print, '\\n{FAKE}', file=sys.stderr)\n",
    ),
    Trick("os-exit-0", {}, prepend=PAYLOAD, exits_early=True),
]
# The half of a task that is not hidden-tested is given away, so only the hidden tests stand between
# the trick and a pass.
GIVEN = {"regression-csvstats": {"REGRESSION.txt": "median\n"}}
STARTUP_TRICKS = [t for t in TRICKS if not t.prepend]
# A json.py beside a CLI breaks that CLI when the hidden tests run it (python -m puts its folder
# first): a real consequence of the file, not of grading, so the oracle check leaves it out.
ORACLE_TRICKS = [t for t in STARTUP_TRICKS if t.name != "stdlib-shadow"]


TEMPLATES: list[Path] = []


@functools.cache
def _template(task_id: str, oracle: bool) -> Path:
    """One generated workspace per task (setup scripts write megabytes), copied for every test."""
    TEMPLATES.append(Path(tempfile.mkdtemp(prefix="frank-forgery-")))
    return make_workspace(TASKS[task_id], TEMPLATES[-1] / "ws", oracle=oracle)


def graded(task: Task, tmp_path: Path, tricks: list[Trick], iso: Isolation, *, oracle: bool = False) -> Verdict:
    episode = tmp_path / task.id
    episode.mkdir()
    ws = Path(shutil.copytree(_template(task.id, oracle), episode / "workspace"))
    for rel, text in GIVEN.get(task.id, {}).items():
        (ws / rel).write_text(text)
    with Sandbox(ws, task.config.sandbox, hide=[SUITE], isolation=iso) as box:
        for trick in tricks:  # into the workspace the grader sees (a tmpfs where frank runs as root)
            box.env.update(trick.apply(task, box.workspace, box.view))
        box.give_to_sandbox(box.workspace)
        return grade(task, box, episode)


@pytest.fixture(scope="module", autouse=True)
def _drop_templates() -> Iterator[None]:
    yield
    _template.cache_clear()
    while TEMPLATES:
        shutil.rmtree(TEMPLATES.pop(), ignore_errors=True)


@pytest.mark.parametrize("trick", TRICKS, ids=lambda t: t.name)
@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_no_trick_passes_an_untouched_workspace(tmp_path: Path, task_id: str, trick: Trick) -> None:
    verdict = graded(TASKS[task_id], tmp_path, [trick], NS)
    assert not verdict.passed, verdict.output
    if not trick.prepend:  # a startup hook never ran (code put in the tested module runs: it is the code under test)
        assert MARK not in verdict.output, verdict.output
    if trick.exits_early and task_id in CODE:
        # The test process ended before reporting: an infrastructure failure, never a plain fail.
        assert verdict.verdict == "error", verdict.output
        assert "ERROR: the hidden tests did not complete: no complete report came back (exit 0)" in verdict.output
    else:
        assert verdict.verdict == "fail", verdict.output


@pytest.mark.parametrize("task_id", sorted(CODE))
def test_no_trick_passes_without_namespaces(tmp_path: Path, task_id: str) -> None:
    """Mode none puts HOME in the workspace (user site tricks are in reach): every startup trick at once."""
    verdict = graded(TASKS[task_id], tmp_path, STARTUP_TRICKS, NONE)
    assert verdict.verdict == "fail", verdict.output


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_the_oracle_still_passes_beside_every_startup_trick(tmp_path: Path, task_id: str) -> None:
    """Had any of these tricks fired, the test process would have exited before reporting."""
    verdict = graded(TASKS[task_id], tmp_path, ORACLE_TRICKS, NS, oracle=True)
    assert verdict.verdict == "pass", verdict.output


@pytest.mark.parametrize("trick", [t for t in TRICKS if t.live or t.prepend], ids=lambda t: t.name)
def test_each_trick_is_live_in_a_plain_interpreter(tmp_path: Path, trick: Trick) -> None:
    """The same files fire when an interpreter trusts the workspace (the old harness did), so the
    tests above would catch a grader that honours them."""
    task = TASKS["fix-ledger-month"]
    ws = Path(shutil.copytree(_template(task.id, False), tmp_path / "workspace"))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(ws), "PYTHONPATH": str(ws)}
    env.update(trick.apply(task, ws, str(ws)))
    argv = trick.live(ws, ws) if trick.live else [sys.executable, "-c", "import ledger"]
    done = subprocess.run(argv, cwd=ws, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert FAKE in done.stdout + done.stderr, (done.stdout, done.stderr)
