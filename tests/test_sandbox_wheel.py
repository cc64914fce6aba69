"""The hidden suite stays hidden when frank is installed from a built wheel into a fresh venv
under /tmp (the layout where it once leaked: the venv was bound back into the private /tmp without
the cover over ``site-packages/frankenstein/agent/suite``). The test builds the wheel from this
working tree, installs it into a new venv and runs a real episode from that venv's Python."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from frankenstein.agent.sandbox import Sandbox, detect_isolation
from frankenstein.agent.tasks import SandboxLimits

REPO = Path(__file__).resolve().parents[1]
NS = detect_isolation()
pytestmark = pytest.mark.skipif(NS.mode == "none", reason=f"no namespaces on this machine: {NS.notes}")
BASE_PY = os.path.realpath(sys.executable)  # the interpreter under our venv
EPISODE = """
import json, sys
from pathlib import Path
import frankenstein
from frankenstein.agent import load_task, run_draw, shipped_suite
from frankenstein.agent.scripted import ScriptedModelServer, call

suite = shipped_suite()
task = load_task(suite / "fix-ledger-month")
command = (f"cat {suite}/log-incident/grader/grade.py; ls {suite}; head -c 20 {suite.parent}/loop.py; echo; "
           f"echo end")
work = Path(sys.argv[1])
with ScriptedModelServer([call("bash", command=command), call("submit")]) as srv:
    [res] = run_draw(srv.base_url, suite, [task], 0, work / "trace.jsonl", work / "episodes")
    out = [m["content"] for m in srv.requests[-1]["messages"] if m["role"] == "tool"][0]
print(json.dumps({"package": frankenstein.__file__, "suite": str(suite), "out": out, "prefix": sys.prefix,
                  "status": res.status, "grader_rc": res.grader_rc, "mode": res.detail["sandbox"]["mode"]}))
"""


def run(*argv: str | Path, **kw: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=300, **kw)  # type: ignore[call-overload]
    assert done.returncode == 0, (argv, done.stdout[-2000:], done.stderr[-2000:])
    return done


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv under /tmp holding frank from a wheel built from this working tree. The wheel's
    dependencies are not installed again: a path line in a .pth appends our venv's site-packages
    (its own .pth files, among them the editable install's, are not processed)."""
    root = Path(tmp_path_factory.mktemp("wheel", numbered=True))
    assert root.is_relative_to("/tmp")
    src = root / "src-copy"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", root / "dist", src)
    [wheel] = sorted((root / "dist").glob("frankenstein-*.whl"))
    venv = root / "venv"
    run(BASE_PY, "-m", "venv", "--without-pip", venv)
    run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        venv / "bin" / "python",
        "install",
        "-q",
        "--no-deps",
        "--no-index",
        wheel,
    )
    [site] = list((venv / "lib").glob("python3*/site-packages"))
    ours = next(p for p in sys.path if p.endswith("site-packages") and Path(p, "pydantic").is_dir())
    (site / "zz-deps.pth").write_text(ours + "\n")
    return venv


def test_the_hidden_suite_is_unreadable_from_a_wheel_install(wheel_venv: Path, tmp_path: Path) -> None:
    done = run(wheel_venv / "bin" / "python", "-c", EPISODE, tmp_path)
    got = json.loads(done.stdout.splitlines()[-1])
    assert got["package"].startswith(str(wheel_venv)) and got["suite"].startswith(str(wheel_venv))
    assert got["prefix"] == str(wheel_venv) and got["mode"] == NS.mode
    out = got["out"]
    assert out.endswith("end\n"), out
    assert "Grader for log-incident" not in out and "fix-ledger-month" not in out, out
    assert out.count("Permission denied") == 2, out  # the cover over site-packages/frankenstein/agent/suite
    assert '"""The agent loop' in out  # the rest of the installed package is there: only the suite is covered
    assert (got["status"], got["grader_rc"]) == ("submitted", 1)  # and the grader still ran


def test_every_shipped_task_is_in_the_wheel(wheel_venv: Path) -> None:
    code = "from frankenstein.agent import load_suite, shipped_suite; print(len(load_suite(shipped_suite())))"
    assert run(wheel_venv / "bin" / "python", "-c", code).stdout.strip() == "6"


@pytest.mark.parametrize("hidden", [os.path.dirname(json.__file__), "/usr/share"], ids=["interpreter", "usr"])
def test_a_hidden_folder_inside_what_is_bound_is_covered(tmp_path: Path, hidden: str) -> None:
    """frank in the interpreter's own site-packages, or in /usr: the cover goes over the bound tree."""
    assert os.listdir(hidden)
    res = Sandbox(tmp_path, SandboxLimits(), hide=[Path(hidden)], isolation=NS).run(f"ls {hidden}; echo end", 20)
    assert res.output.endswith("end\n") and "Permission denied" in res.output, res.output
