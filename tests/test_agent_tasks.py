"""Task folders, their hash, workspaces, suite validation and ``frank tasks``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from frankenstein.agent.sandbox import detect_isolation
from frankenstein.agent.scripted import write_task
from frankenstein.agent.tasks import (
    MAX_TASK_BYTES,
    folder_bytes,
    load_suite,
    load_task,
    make_workspace,
    shipped_suite,
    task_hash,
)
from frankenstein.agent.validate import check_task, table
from frankenstein.errors import TaskError

SUITE = shipped_suite()
SHIPPED = [
    "fix-ledger-month",
    "latency-report",
    "log-incident",
    "regression-csvstats",
    "spec-durations",
    "todo-feature",
]


def frank(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "frankenstein", *args], capture_output=True, text=True, timeout=300)


def test_shipped_suite_loads() -> None:
    tasks = load_suite(SUITE)
    assert [t.id for t in tasks] == SHIPPED
    for t in tasks:
        assert t.config.version >= 1 and t.prompt.strip()
        assert folder_bytes(t.dir) < MAX_TASK_BYTES
        assert len(t.hash) == 64


def test_shipped_graders_share_one_harness() -> None:
    copies = {
        (SUITE / t / "grader" / "harness.py").read_bytes()
        for t in SHIPPED
        if (SUITE / t / "grader" / "harness.py").exists()
    }
    assert len(copies) == 1


def test_hash_covers_every_file(tmp_path: Path) -> None:
    folder = write_task(tmp_path, "t1")
    first = task_hash(folder)
    assert task_hash(folder) == first
    (folder / "grader" / "__pycache__").mkdir()
    (folder / "grader" / "__pycache__" / "x.pyc").write_bytes(b"junk")
    assert task_hash(folder) == first  # caches do not count
    (folder / "oracle" / "answer.txt").write_text("43\n")
    assert task_hash(folder) != first
    (folder / "oracle" / "answer.txt").write_text("42\n")
    assert task_hash(folder) == first
    os.chmod(folder / "grader" / "grade.py", 0o755)
    assert task_hash(folder) != first


@pytest.mark.parametrize(
    ("toml", "field", "message"),
    [
        ('id = "t1"\n', "version", "missing"),
        ('id = "t1"\nversion = 1\ncolour = "red"\n', "colour", "unknown field"),
        ('id = "t1"\nversion = 1\n[limits]\nturns = 0\n', "limits.turns", "Input should be greater than or equal to 1"),
        ('id = "t1"\nversion = 1\n[sandbox]\nprocess = 5\n', "sandbox.process", "unknown field"),
        ('id = "T 1"\nversion = 1\n', "id", "String should match pattern '^[a-z0-9][a-z0-9-]*$'"),
        ('id = "other"\nversion = 1\n', "id", "id 'other' differs from the folder name 't1'"),
        ('id = "t1"\nversion = 1\nsetup = "../../etc/passwd"\n', "setup", "must name a file inside the task folder"),
    ],
)
def test_bad_task_toml_names_file_and_field(tmp_path: Path, toml: str, field: str, message: str) -> None:
    folder = write_task(tmp_path, "t1")
    (folder / "task.toml").write_text(toml)
    with pytest.raises(TaskError) as err:
        load_task(folder)
    assert str(err.value) == f"{folder / 'task.toml'}: {field}: {message}"


def test_broken_toml_and_missing_parts(tmp_path: Path) -> None:
    folder = write_task(tmp_path, "t1")
    (folder / "task.toml").write_text("id = \n")
    with pytest.raises(TaskError, match=r"task.toml: not valid TOML \(Invalid value"):
        load_task(folder)
    folder = write_task(tmp_path, "t2")
    (folder / "oracle" / "answer.txt").unlink()
    (folder / "oracle").rmdir()
    with pytest.raises(TaskError) as err:
        load_task(folder)
    assert str(err.value) == f"{folder}: missing oracle"
    with pytest.raises(TaskError) as err:
        load_suite(tmp_path / "nowhere")
    assert str(err.value) == f"{tmp_path / 'nowhere'}: not a folder"
    with pytest.raises(TaskError, match="unknown task id"):
        load_suite(SUITE, ["no-such-task"])


def test_workspace_is_fresh_and_setup_is_deterministic(tmp_path: Path) -> None:
    task = next(t for t in load_suite(SUITE) if t.id == "log-incident")
    a = make_workspace(task, tmp_path / "a")
    b = make_workspace(task, tmp_path / "b")
    log_a, log_b = (a / "logs" / "service.log").read_bytes(), (b / "logs" / "service.log").read_bytes()
    assert log_a == log_b and len(log_a) > 3_000_000
    assert not (a / "answer.json").exists()
    c = make_workspace(task, tmp_path / "c", oracle=True)
    assert (c / "answer.json").read_text() == (task.dir / "oracle" / "answer.json").read_text()


def test_a_failing_setup_script_is_a_task_error(tmp_path: Path) -> None:
    folder = write_task(tmp_path, "t1", toml_extra='setup = "make.py"\n')
    (folder / "make.py").write_text("import sys\nsys.stderr.write('no disk')\nsys.exit(2)\n")
    with pytest.raises(TaskError) as err:
        make_workspace(load_task(folder), tmp_path / "ws")
    assert str(err.value) == f"{folder / 'make.py'}: setup script failed (exit 2): no disk"


def test_validate_accepts_a_good_task(tmp_path: Path) -> None:
    check = check_task(load_task(write_task(tmp_path, "good")), k=2)
    assert (check.oracle, check.untouched, check.agree, check.problems) == (["pass"] * 2, ["fail"] * 2, True, [])


@pytest.mark.parametrize(
    ("grader", "problem"),
    [
        ("import sys\nsys.exit(0)\n", "untouched workspace run 1: pass (want fail)"),
        ("import sys\nsys.exit(1)\n", "oracle run 1: fail (want pass)"),
        ("import sys\nsys.exit(2)\n", "oracle run 1: error (want pass)"),
        (
            "import os, sys, time\nprint(time.time_ns())\np = sys.argv[1] + '/answer.txt'\n"
            "sys.exit(0 if os.path.exists(p) and open(p).read().strip() == '42' else 1)\n",
            "repeated grader runs disagree (exit code or output differ)",
        ),
    ],
)
def test_validate_catches_bad_tasks(tmp_path: Path, grader: str, problem: str) -> None:
    check = check_task(load_task(write_task(tmp_path, "bad", grader=grader)), k=1)
    assert not check.ok
    assert any(p.startswith(problem) for p in check.problems), check.problems


SEED_2MB = "import sys\nfrom pathlib import Path\nPath(sys.argv[1], 'data.bin').write_bytes(bytes(2 << 20))\n"


def test_validate_names_a_seed_over_its_quota(tmp_path: Path) -> None:
    """A setup script that writes 2 MB into a 1 MB workspace: no episode could ever be worked there (a tmpfs
    refuses the seed; a checked quota ends the first tool call). Validation names it, whatever the quota."""
    root = write_task(tmp_path, "fat", toml_extra='setup = "setup.py"\n[sandbox]\nworkspace_mb = 1\n')
    (root / "setup.py").write_text(SEED_2MB)
    check = check_task(load_task(root), k=1)
    size = (2 << 20) + len("a test task\n")  # data.bin and write_task's README.md
    assert check.problems[0] == f"the seeded workspace holds {size} bytes, over its quota of 1 MB"
    if detect_isolation().quota == "tmpfs":
        assert check.problems[1:] == ["sandbox: the task's workspace does not fit its quota of 1 MB"]


def test_validate_table() -> None:
    from frankenstein.agent.validate import TaskCheck

    ok = TaskCheck("a", "0123456789ab", 1500, ["pass"] * 3, ["fail"] * 3)
    bad = TaskCheck(
        "long-name",
        "ba9876543210",
        250,
        ["pass", "fail", "pass"],
        ["fail"] * 3,
        problems=["oracle run 2: fail (want pass): x"],
    )
    assert table([ok, bad], 3) == [
        "task       hash          size   oracle    untouched  agree  ok",
        "a          0123456789ab  1.5kB  3/3 pass  3/3 fail   yes    ok",
        "long-name  ba9876543210  0.2kB  2/3 pass  3/3 fail   yes    FAIL",
        "long-name: oracle run 2: fail (want pass): x",
    ]


def test_cli_validate_shipped_suite() -> None:
    done = frank("tasks", "validate", str(SUITE), "-k", "1")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("sandbox: ")
    rows = [ln.split() for ln in lines if ln.split() and ln.split()[0] in SHIPPED]
    assert [r[0] for r in rows] == SHIPPED
    assert all(r[3:] == ["1/1", "pass", "1/1", "fail", "yes", "ok"] for r in rows)


def test_cli_validate_fails_on_a_bad_task(tmp_path: Path) -> None:
    write_task(tmp_path, "good")
    write_task(tmp_path, "broken", grader="import sys\nsys.exit(0)\n")
    done = frank("tasks", "validate", str(tmp_path), "-k", "1")
    assert done.returncode == 1
    assert done.stdout.splitlines()[-1] == "broken: untouched workspace run 1: pass (want fail)"
    assert [ln.split()[-1] for ln in done.stdout.splitlines()[2:4]] == ["FAIL", "ok"]


def test_cli_validate_bad_folder(tmp_path: Path) -> None:
    done = frank("tasks", "validate", str(tmp_path / "missing"))
    assert done.returncode == 1
    assert done.stderr.strip() == f"frank: error: {tmp_path / 'missing'}: not a folder"


def test_cli_list() -> None:
    done = frank("tasks", "list")
    assert done.returncode == 0
    assert [ln.split()[0] for ln in done.stdout.splitlines()] == SHIPPED


def test_cli_help_has_examples() -> None:
    for cmd in ("validate", "list", "draw"):
        done = frank("tasks", cmd, "--help")
        assert "Example: frank tasks " + cmd in done.stdout
