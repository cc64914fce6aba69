"""The sandbox: attacks run as real episodes (scripted model server, a TEST DOUBLE, driving the real
loop, sandbox and grader), each contained and recorded; plus the sandbox's own pieces."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest

from frankenstein.agent import load_suite, run_draw, shipped_suite
from frankenstein.agent.draw import EpisodeResult
from frankenstein.agent.sandbox import (
    Isolation,
    Sandbox,
    ToolRefused,
    cut_middle,
    detect_isolation,
    scrubbed_env,
)
from frankenstein.agent.scripted import ScriptedModelServer, Step, call, write_task
from frankenstein.agent.tasks import SandboxLimits, load_task
from frankenstein.errors import SandboxError

NONE = Isolation("none", ("forced by the test",))
NS = detect_isolation()
needs_ns = pytest.mark.skipif(NS.mode == "none", reason=f"no namespaces on this machine: {NS.notes}")
MODES = [pytest.param(NS, id=NS.mode, marks=needs_ns), pytest.param(NONE, id="forced-none")]


def pids_with(marker: str) -> list[int]:
    """Live processes whose command line holds ``marker`` (the host's view of /proc)."""
    found = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and p.name != str(os.getpid()):
            try:
                cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ")
                state = (p / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if marker.encode() in cmd and state != "Z":
                found.append(int(p.name))
    return found


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie (a killed orphan waits a moment for init to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def episode(
    tmp_path: Path, steps: list[Step], iso: Isolation, toml_extra: str = "", grader: str | None = None
) -> tuple[EpisodeResult, list[dict]]:
    extra = {"grader": grader} if grader else {}
    task = load_task(write_task(tmp_path / "suite", "box", toml_extra=toml_extra, **extra))
    with ScriptedModelServer([*steps, call("submit")]) as srv:
        [res] = run_draw(
            srv.base_url, tmp_path / "suite", [task], 0, tmp_path / "trace.jsonl", tmp_path / "work", isolation=iso
        )
        return res, srv.requests


def tool_results(requests: list[dict]) -> list[str]:
    """What the model was told after each tool call, from the requests the server received."""
    return [m["content"] for m in requests[-1]["messages"] if m["role"] == "tool"]


# ---------------------------------------------------------------- attacks, as recorded episodes


@pytest.mark.parametrize("iso", MODES)
def test_writing_outside_the_workspace(tmp_path: Path, iso: Isolation) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    steps = [
        call("write_file", path="../escape.txt", content="x"),
        call("write_file", path=str(outside / "abs.txt"), content="x"),
        call("bash", command=f"ln -s {outside} link"),
        call("write_file", path="link/through-symlink.txt", content="x"),
        call("write_file", path="answer.txt", content="42"),
    ]
    res, requests = episode(tmp_path, steps, iso)
    assert list(outside.iterdir()) == []
    assert not (tmp_path / "work" / "box-d0" / "escape.txt").exists()
    assert res.detail["refusals"] == [
        "write_file: ../escape.txt: '..' is not allowed in paths",
        f"write_file: {outside}/abs.txt: outside the workspace ({res.detail['sandbox']['mode'] != 'none' and '/tmp/workspace' or tmp_path / 'work' / 'box-d0' / 'workspace'})",
        "write_file: link/through-symlink.txt: resolves outside the workspace",
    ]
    assert (res.status, res.passed) == ("submitted", True)
    assert tool_results(requests)[-1] == "wrote 2 bytes to answer.txt"


@needs_ns
def test_shell_writes_outside_the_workspace_go_nowhere(tmp_path: Path) -> None:
    target = tmp_path / "shell-escape.txt"
    home_target = Path("/var/tmp") / f"frank-escape-{os.getpid()}"
    res, requests = episode(
        tmp_path,
        [call("bash", command=f"echo x > {target}; echo x > {home_target}; touch /etc/frank-escape; echo done")],
        NS,
    )
    assert not target.exists() and not home_target.exists() and not Path("/etc/frank-escape").exists()
    out = tool_results(requests)[0]
    assert "Read-only file system" in out and out.endswith("done\n")
    assert res.detail["commands"][0]["rc"] == 0


@pytest.mark.parametrize("iso", MODES)
def test_reading_the_grader(tmp_path: Path, iso: Isolation) -> None:
    grader = "# SECRET-GRADER-MARK-7f3a\nimport sys\nsys.exit(1)\n"
    suite_grader = tmp_path / "suite" / "box" / "grader" / "grade.py"
    steps = [call("read_file", path="../grader/grade.py"), call("read_file", path=str(suite_grader))]
    res, requests = episode(tmp_path, steps, iso, grader=grader)
    assert res.detail["refusals"][0] == "read_file: ../grader/grade.py: '..' is not allowed in paths"
    assert res.detail["refusals"][1].startswith(f"read_file: {suite_grader}: outside the workspace")
    trace_text = (tmp_path / "trace.jsonl").read_text()
    assert "SECRET-GRADER-MARK-7f3a" not in trace_text and "SECRET-GRADER-MARK-7f3a" not in str(requests)
    assert (res.status, res.grader_rc) == ("submitted", 1)  # the grader ran, after the agent stopped


@needs_ns
def test_the_shell_cannot_read_the_shipped_graders(tmp_path: Path) -> None:
    suite = shipped_suite()
    # An editable install (a checkout): the package is not in the minimal root at all. Installed
    # into the Python the sandbox runs (a venv, site-packages), the suite is covered (mode 000).
    task = next(t for t in load_suite(suite) if t.id == "log-incident")
    command = f"cat {suite}/log-incident/grader/grade.py; ls {suite}; echo end"
    with ScriptedModelServer([call("bash", command=command), call("submit")]) as srv:
        [res] = run_draw(srv.base_url, suite, [task], 0, tmp_path / "trace.jsonl", tmp_path / "work", isolation=NS)
        out = tool_results(srv.requests)[0]
    assert out.endswith("end\n")
    assert "Grader for log-incident" not in out and "fix-ledger-month" not in out
    assert out.count("No such file or directory") + out.count("Permission denied") == 2, out
    assert "Grader for log-incident" not in (tmp_path / "trace.jsonl").read_text()
    assert (res.status, res.grader_rc) == ("submitted", 1)


@needs_ns
def test_opening_a_network_connection(tmp_path: Path) -> None:
    canary = socket.create_server(("127.0.0.1", 0))
    canary.settimeout(0.2)
    port = canary.getsockname()[1]
    accepted: list[object] = []

    def watch() -> None:
        end = time.monotonic() + 10
        while time.monotonic() < end and not accepted:
            try:
                accepted.append(canary.accept())
            except (TimeoutError, OSError):
                continue

    watcher = threading.Thread(target=watch)
    watcher.start()
    probe = (
        "python -c \"import socket\nfor a in [('127.0.0.1', %d), ('1.1.1.1', 53)]:\n try:\n  "
        "socket.create_connection(a, 2); print('CONNECTED', a)\n except OSError as e: print('blocked', a, e.errno)\""
    )
    try:
        res, requests = episode(tmp_path, [call("bash", command=probe % port)], NS)
    finally:
        accepted.append("stop") if not accepted else None
        watcher.join()
        canary.close()
    out = tool_results(requests)[0]
    assert "CONNECTED" not in out and out.count("blocked") == 2
    assert accepted == ["stop"]  # nothing reached the host's loopback
    assert res.detail["sandbox"]["network_isolated"] is True


@needs_ns
def test_a_fork_bomb(tmp_path: Path) -> None:
    marker = f"forkbomb-{os.getpid()}-{time.monotonic_ns()}"
    steps = [
        call("bash", command=f"bomb() {{ bomb | bomb & }}; bomb; sleep 2; echo after-bomb # {marker}"),
        call("bash", command="echo still-alive"),
    ]
    res, requests = episode(tmp_path, steps, NS, "[limits]\ncommand_timeout_s = 8\n[sandbox]\nprocesses = 16\n")
    assert pids_with(marker) == []
    bombed = tool_results(requests)[0]
    assert "fork: retry: Resource temporarily unavailable" in bombed  # the process limit stopped it
    assert tool_results(requests)[1] == "exit code: 0\nstill-alive\n"
    assert len(res.detail["commands"]) == 2 and res.detail["commands"][0]["seconds"] < 9


@pytest.mark.parametrize("iso", MODES)
def test_endless_output(tmp_path: Path, iso: Isolation) -> None:
    steps = [call("bash", command="yes"), call("bash", command="head -c 5000000 /dev/zero > big.bin; echo rc=$?")]
    res, requests = episode(
        tmp_path, steps, iso, "[sandbox]\nmax_output_bytes = 2000000\noutput_chars = 1000\nfile_size_mb = 1\n"
    )
    first = res.detail["commands"][0]
    assert first["output_overflow"] is True and first["rc"] is None and first["total_bytes"] > 2_000_000
    out = tool_results(requests)[0]
    assert out.startswith("exit code: killed\ny\ny\n") and "bytes cut from the middle" in out
    assert out.endswith("[output passed 2000000 bytes; the command was killed]") and len(out) < 1300
    assert "rc=0" not in tool_results(requests)[1]
    assert (tmp_path / "work" / "box-d0" / "workspace" / "big.bin").stat().st_size <= 1 << 20


@pytest.mark.parametrize("iso", MODES)
def test_sleeping_forever(tmp_path: Path, iso: Isolation) -> None:
    marker = f"sleeper-{os.getpid()}-{time.monotonic_ns()}"
    steps = [call("bash", command=f"sleep 100000 & echo $! > sleeper.pid; wait # {marker}")]
    if iso.namespaces:  # setsid and nohup escape a process group, not a PID namespace
        steps.append(
            call("bash", command=f"(setsid sleep 100001 &); (nohup sleep 100002 >/dev/null &); echo started # {marker}")
        )
    res, requests = episode(tmp_path, steps, iso, "[limits]\ncommand_timeout_s = 1\n")
    first = res.detail["commands"][0]
    assert first["timed_out"] is True and first["rc"] is None and first["seconds"] < 3
    assert tool_results(requests)[0].startswith("exit code: killed\n[timed out after 1 s")
    pid = int((tmp_path / "work" / "box-d0" / "workspace" / "sleeper.pid").read_text())
    if not iso.namespaces:  # the pid file holds a host pid
        assert not alive(pid)
    else:
        assert tool_results(requests)[1] == "exit code: 0\nstarted\n"
    assert pids_with(marker) == []


# ---------------------------------------------------------------- the pieces


def test_detect_isolation_names_its_mode() -> None:
    assert NS.mode in ("root", "userns", "none")
    assert bool(NS.notes) == (NS.mode == "none")


def test_environment_is_scrubbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "also-secret")
    box = Sandbox(tmp_path, SandboxLimits(), isolation=NS)
    res = box.run("env", timeout_s=10)
    names = sorted(line.split("=", 1)[0] for line in res.output.splitlines())
    assert "sk-should-not-leak" not in res.output and "also-secret" not in res.output
    assert set(names) - {"PWD", "SHLVL", "_"} == set(scrubbed_env("/tmp"))


@needs_ns
def test_resource_limits_are_set(tmp_path: Path) -> None:
    limits = SandboxLimits(cpu_s=7, memory_mb=1024, file_size_mb=3, processes=33, open_files=99)
    res = Sandbox(tmp_path, limits, isolation=NS).run("for o in t v f u n; do ulimit -$o; done", timeout_s=10)
    assert res.output.split() == ["7", str(1024 * 1024), str(3 * 1024), "33", "99"]  # bash: -v, -f in KiB


@needs_ns
def test_the_workspace_view(tmp_path: Path) -> None:
    with Sandbox(tmp_path, SandboxLimits(), isolation=NS) as box:
        res = box.run("pwd; touch here.txt && echo ok; ps -e | wc -l", timeout_s=10)
    assert res.output.split() == ["/tmp/workspace", "ok", "4"]  # ps: a header, then only bash, ps and wc
    assert (tmp_path / "here.txt").exists()  # a tmpfs workspace is copied back on close


def test_paths_are_confined(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    box = Sandbox(tmp_path, SandboxLimits(), isolation=NONE)
    assert box.resolve("sub/a.txt") == tmp_path / "sub" / "a.txt"
    assert box.resolve(str(tmp_path / "sub")) == tmp_path / "sub"
    for bad, why in [
        ("", "empty path"),
        ("../x", "../x: '..' is not allowed in paths"),
        ("/etc/passwd", f"/etc/passwd: outside the workspace ({tmp_path})"),
        ("sub/../../x", "sub/../../x: '..' is not allowed in paths"),
    ]:
        with pytest.raises(ToolRefused) as err:
            box.resolve(bad)
        assert str(err.value) == why
    with pytest.raises(ToolRefused, match="is a folder"):
        box.write_file("sub", "x")
    with pytest.raises(ToolRefused, match="no such file"):
        box.read_file("missing.txt")


def test_long_files_are_cut_in_the_middle() -> None:
    assert cut_middle(b"short", 100) == "short"
    text = cut_middle(b"a" * 60 + b"b" * 60, 40)
    assert text == "a" * 20 + "\n[... 80 bytes cut from the middle (120 bytes in all) ...]\n" + "b" * 20


def test_a_launcher_failure_is_a_sandbox_error(tmp_path: Path) -> None:
    box = Sandbox(tmp_path, SandboxLimits(), isolation=Isolation("bogus"))
    with pytest.raises(SandboxError, match=r"^jail: sandbox setup failed \(bogus\): unknown mode$"):
        box.run("true", timeout_s=10)


def test_a_command_cannot_fake_a_launcher_failure(tmp_path: Path) -> None:
    res = Sandbox(tmp_path, SandboxLimits(), isolation=NS).run("echo 'jail: sandbox setup failed'; exit 125", 10)
    assert (res.rc, res.output) == (125, "jail: sandbox setup failed\n")


# ---------------------------------------------------------------- issue 30: tools that cannot be knocked over

KNOCKS = [  # (tool call, words of the error the model is told)
    (call("write_file", path="fifo", content="x"), "fifo: not a regular file"),
    (call("read_file", path="fifo"), "not a regular file"),
    (call("write_file", path="loop1/x.txt", content="x"), "cannot be resolved"),
    (call("read_file", path="loop1"), "cannot be resolved"),
    (call("write_file", path="afile/under.txt", content="x"), "afile/under.txt: "),
    (call("read_file", path="afile/under.txt"), "afile/under.txt: "),
    (call("write_file", path="n" * 300, content="x"), "path too long"),
    (call("read_file", path="d/" + "n" * 300), "path too long"),
    (call("write_file", path="\ud800.txt", content="x"), "the path is not valid text"),
    (call("write_file", path="ok.txt", content="a\ud800b"), "the content is not valid text"),
    (call("write_file", path="a\x00b", content="x"), "a path may not hold a NUL byte"),
    (call("bash", command="echo a\x00b"), "a command may not hold a NUL byte"),
    (call("bash", command="echo \udc80"), "the command is not valid text"),
]


@pytest.mark.parametrize("iso", MODES)
def test_every_model_controlled_input_is_a_tool_error(tmp_path: Path, iso: Isolation) -> None:
    """A symlink loop, a path under a file, a 300-character name, a lone surrogate, a NUL in a path or a
    command, a FIFO to write or read: each killed the whole draw, and write_file onto a FIFO blocked past the
    episode's wall time (issue 30). Each is now an ``error:`` the model reads, and the episode goes on to pass,
    well within its wall-time limit."""
    setup = call("bash", command="mkfifo fifo && ln -s loop2 loop1 && ln -s loop1 loop2 && echo x > afile")
    steps = [setup, *(step for step, _ in KNOCKS), call("write_file", path="answer.txt", content="42")]
    t0 = time.monotonic()
    res, requests = episode(tmp_path, steps, iso, "[limits]\nwall_time_s = 60\n")
    assert time.monotonic() - t0 < 30
    assert (res.status, res.passed) == ("submitted", True), res.detail
    told = tool_results(requests)
    assert told[0] == "exit code: 0\n"
    for (step, words), answer in zip(KNOCKS, told[1:], strict=False):
        assert answer.startswith("error: ") and words in answer, (step, answer)
    assert told[len(KNOCKS) + 1] == "wrote 2 bytes to answer.txt"
    assert len(res.detail["refusals"]) == len(KNOCKS)


def test_the_workspace_quota_ends_the_episode(tmp_path: Path) -> None:
    """Files under the per-file limit wrote 229 MB with no quota (issue 30). Without a tmpfs (mode none here)
    the quota is checked: a write_file that would pass it is refused before a byte is written, and a command
    that fills the workspace past it ends the episode (``workspace_limit``)."""
    steps = [
        call("bash", command="head -c 1000000 /dev/zero > a"),  # 0.95 MiB of a 1 MiB quota
        call("write_file", path="b.txt", content="x" * 102400),
        call("bash", command="head -c 200000 /dev/zero > c"),
    ]
    res, requests = episode(tmp_path, steps, NONE, "[sandbox]\nworkspace_mb = 1\n")
    told = tool_results(requests)
    assert told[0] == "exit code: 0\n"
    assert told[1] == "error: writing 102400 bytes would pass the workspace quota of 1 MB"
    assert (res.status, res.turns) == ("workspace_limit", 3)
    assert res.detail["stop_reason"] == "the workspace holds more than its quota of 1 MB"
    # what the record says the numbers rest on (as root the quota is a tmpfs: tests/test_sandbox_quota.py)
    assert res.detail["sandbox"]["workspace_quota"] == "1 MB checked after each tool call"
    assert res.detail["sandbox"]["quota_note"] == ""  # a forced mode: no probe said why


@needs_ns
def test_each_sandbox_has_a_uid_of_its_own(tmp_path: Path) -> None:
    if NS.mode != "root":
        pytest.skip("a uid per sandbox is given where frank runs as root (userns maps one uid)")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = Sandbox(tmp_path / "a", SandboxLimits())
    b = Sandbox(tmp_path / "b", SandboxLimits())
    ids = {int(box.run("id -u", timeout_s=20).output.strip()) for box in (a, b)}
    assert len(ids) == 2 and 65534 not in ids and 0 not in ids
