"""No engine outlives frank: Ctrl-C during a start, kill -9 of frank, and bad input (real processes)."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import frank, pids_of
from frankenstein.engines.process import write_pid_file
from helpers_campaign import TOML, make_campaign

pytestmark = pytest.mark.engine


def _wait_for(predicate, timeout: float = 30.0, what: str = "condition"):  # type: ignore[no-untyped-def]
    """Poll for an event (not a sleep to make a test pass): fail with a message on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _engine_pid(runtime: Path) -> int:
    files = _wait_for(lambda: list(runtime.glob("*.json")), what="an engine pid file")
    return int(files[0].stem)


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def _slow_wrapper(tmp_path: Path, real: str, delay: float = 20.0) -> Path:
    """A real wrapper program that waits before exec'ing llama-server: a start that takes a while."""
    w = tmp_path / "slow-llama-server"
    w.write_text(f'#!/bin/sh\nsleep {delay}\nexec {real} "$@"\n')
    w.chmod(w.stat().st_mode | stat.S_IEXEC)
    return w


def test_sigint_during_start_leaves_nothing(tmp_path: Path, llama_server_bin: str, _runtime_dir: Path) -> None:
    c = make_campaign(tmp_path / "c")
    env = {"FRANK_LLAMA_SERVER": str(_slow_wrapper(tmp_path, llama_server_bin))}
    p = subprocess.Popen(
        [sys.executable, "-m", "frankenstein", "engine", "check", "-c", str(c.root)],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    pid = _engine_pid(_runtime_dir)
    assert not _gone(pid)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "interrupted; engines stopped" in err
    assert _gone(pid)
    assert pids_of(str(tmp_path)) == []
    assert list(_runtime_dir.glob("*.json")) == []


def test_kill9_of_frank_kills_its_engine(tmp_path: Path, _runtime_dir: Path) -> None:
    c = make_campaign(tmp_path / "c")
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "frankenstein",
            "engine",
            "check",
            "-c",
            str(c.root),
            "--requests",
            "100000",
            "--n-predict",
            "64",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert p.stdout is not None
    assert "ready at" in p.stdout.readline()
    pid = _engine_pid(_runtime_dir)
    p.kill()
    p.wait()
    _wait_for(lambda: _gone(pid), timeout=15, what="llama-server to die with its parent")
    assert pids_of(str(tmp_path)) == []


def test_leftovers_are_reaped_by_the_next_command(tmp_path: Path, llama_server_bin: str, _runtime_dir: Path) -> None:
    """Second line of defence: a pid file whose owner is gone makes the next command kill that group."""
    from frankenstein.engines.process import reap_leftovers

    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
    (_runtime_dir / f"{child.pid}.json").write_text(
        f'{{"pid": {child.pid}, "pgid": {child.pid}, "owner": 999999999, "argv": ["sleep"]}}'
    )
    assert reap_leftovers() == [child.pid]
    assert child.wait(timeout=10) == -signal.SIGKILL


def test_a_pid_file_left_under_its_writing_name_is_reaped_once_whole_and_a_torn_one_after_a_minute(
    _runtime_dir: Path,
) -> None:
    """frank killed between writing a pid file and renaming it leaves ``N.json.part``: whole, its group is killed as
    for ``N.json``; not whole (killed mid-write), it is left to a writer for a minute (a live one renames it within
    microseconds), then removed. A torn ``N.json`` is removed at once, as before."""
    from frankenstein.engines.process import PART_GRACE_S, reap_leftovers

    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
    part = _runtime_dir / f"{child.pid}.json.part"
    part.write_text(f'{{"pid": {child.pid}, "pgid": {child.pid}, "owner": 999999999, "argv": ["sleep"]}}')
    torn_part, torn = _runtime_dir / "4000001.json.part", _runtime_dir / "4000002.json"
    torn_part.write_text('{"pid": 40')
    torn.write_text('{"pid": 40')
    assert reap_leftovers() == [child.pid]
    assert child.wait(timeout=10) == -signal.SIGKILL
    assert sorted(p.name for p in _runtime_dir.iterdir()) == [torn_part.name]
    old = time.time() - PART_GRACE_S - 1
    os.utime(torn_part, (old, old))
    assert reap_leftovers() == [] and list(_runtime_dir.iterdir()) == []


REAP_LOOP = """
import pathlib, sys
from frankenstein.engines.process import reap_leftovers
stop = pathlib.Path(sys.argv[1])
print("reaping", flush=True)
while not stop.exists():
    reap_leftovers()
"""


def test_a_reaper_in_another_process_never_takes_a_pid_file_being_written(tmp_path: Path, _runtime_dir: Path) -> None:
    """Another frank's reaper (a second process calling reap_leftovers in a loop, as every engine start and block
    does) while this one writes 3,000 pid files: each is still there once written. The reaper deletes a file it
    cannot read, so one written in place (empty for a moment) was taken from under a live engine: this failed
    on that code (files lost in each of 3 runs). Every file names this live process as its owner, so the reaper
    kills nothing."""
    stop = tmp_path / "stop"
    reaper = subprocess.Popen([sys.executable, "-c", REAP_LOOP, str(stop)], stdout=subprocess.PIPE, text=True)
    try:
        assert reaper.stdout is not None and reaper.stdout.readline() == "reaping\n"
        lost = []
        for n in range(3000):
            path = write_pid_file(4_000_000 + n, ["engine", "--flag"], "token")  # above any pid_max: no process
            if not path.exists():
                lost.append(path.name)
            path.unlink(missing_ok=True)
    finally:
        stop.touch()
        assert reaper.wait(timeout=30) == 0
    assert lost == []
    assert [p.name for p in _runtime_dir.iterdir()] == []  # no part file left behind either


def _check(c_root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return frank("engine", "check", "-c", str(c_root), "--requests", "1", *args, env=env, timeout=120)


def test_missing_model_file(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c", TOML.replace('"pkg:tiny-target.gguf"', '"models/nope.gguf"'))
    r = _check(c.root)
    assert r.returncode == 1
    assert (
        r.stderr.strip()
        == f"frank: error: recipes.base.model: model file not found: {c.root.resolve() / 'models/nope.gguf'}"
    )
    assert pids_of(str(tmp_path)) == []


def test_flag_llama_server_rejects(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c", TOML + '\n[parts.bogus]\nargs = ["--no-such-flag"]\n')
    r = _check(c.root, "--part", "bogus")
    assert r.returncode == 1
    first = r.stderr.splitlines()[0]
    assert first.startswith("frank: error: llama-server exited with code 1 during start (log: ")
    assert "--- engine log (tail) ---" in r.stderr and "--no-such-flag" in r.stderr
    assert pids_of(str(tmp_path)) == []


def test_port_already_in_use(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = _check(c.root, "--port", str(port))
    assert r.returncode == 1
    assert r.stderr.strip() == f"frank: error: port 127.0.0.1:{port} is already in use; choose another port"


def test_malformed_frank_toml(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    (c.root / "frank.toml").write_text('served = "base"\n[recipes.base\nengine = "llamacpp"\n')
    r = _check(c.root)
    assert r.returncode == 1
    assert r.stderr.startswith(f"frank: error: {c.root / 'frank.toml'}: not valid TOML: ")
    (c.root / "frank.toml").write_text('served = "base"\n[recipes.base]\nengine = "llamacpp"\nthreads = 4\n')
    r = _check(c.root)
    assert r.stderr.strip() == f"frank: error: {c.root / 'frank.toml'}: recipes.base.threads: unknown field"


def test_missing_llama_server_binary(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    r = _check(c.root, env={"FRANK_LLAMA_SERVER": str(tmp_path / "no-llama-server")})
    assert r.returncode == 1
    assert r.stderr.strip().startswith(
        f"frank: error: llama-server not found at {tmp_path / 'no-llama-server'} (from FRANK_LLAMA_SERVER); install it with"
    )


def test_usage_error_exits_2(tmp_path: Path) -> None:
    r = frank("engine", "check", "--requests", "many")
    assert r.returncode == 2
    assert "Invalid value for '--requests'" in r.stderr


def test_engine_killed_by_sigill_says_what_that_usually_means(tmp_path: Path) -> None:
    """An engine binary that dies by SIGILL at load (a -march=native llama.cpp build running AMX tiles on a VM
    that traps them, seen on these machines): the start error names the signal and the usual remedies, not a
    bare negative code. The stand-in is a real executable (named as a test double for a crashing build) that
    answers --version like llama-server and then kills itself with SIGILL."""
    fake = tmp_path / "llama-server"
    fake.write_text(
        '#!/bin/sh\nfor a in "$@"; do [ "$a" = --version ] && { echo "version: 1 (sigill)" >&2; exit 0; }; done\n'
        "kill -ILL $$\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    c = make_campaign(tmp_path / "c")
    r = _check(c.root, env={**os.environ, "FRANK_LLAMA_SERVER": str(fake)})
    assert r.returncode == 1 and "Traceback" not in r.stderr
    first = r.stderr.splitlines()[0]
    assert first.startswith("frank: error: llama-server was killed by SIGILL: the binary ran a CPU instruction"), first
    assert "--no-repack" in first and "GGML_NATIVE=OFF" in first and "during start (log: " in first
    assert pids_of(str(tmp_path)) == []


DAEMONISING_ENGINE = """\
import os, sys, time
if os.fork() == 0:  # a worker that leaves the engine's process group and parent: setsid and a double fork
    os.setsid()
    if os.fork():
        os._exit(0)
    open(sys.argv[1] + ".tmp", "w").write(str(os.getpid()))
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(300)
time.sleep(300)
"""


@pytest.mark.parametrize("owner_dies", [False, True], ids=["stop", "owner-killed"])
def test_a_setsid_daemon_of_an_engine_is_reaped_with_it(tmp_path: Path, _runtime_dir: Path, owner_dies: bool) -> None:
    """An engine's worker that called setsid and double-forked was outside the group the stop kills (issue 30):
    it carries the start's token in its environment, and the stop kills every holder; so does the next
    command's reaping when the owner is gone (as after ``kill -9`` of frank)."""
    from frankenstein.engines.process import EngineProcess, reap_leftovers

    mark = tmp_path / "daemon"
    script = tmp_path / "engine.py"
    script.write_text(DAEMONISING_ENGINE)
    proc = EngineProcess([sys.executable, str(script), str(mark)], env={}, log_path=tmp_path / "e.log", name="e")
    proc.launch()
    daemon = int(_wait_for(lambda: mark.exists() and mark.read_text(), what="the daemon's pid file"))
    assert proc.proc is not None and not _gone(daemon)
    assert os.getpgid(daemon) == os.getsid(daemon) != os.getsid(proc.proc.pid)  # its own session and group
    if owner_dies:  # the pid file names an owner that is gone
        assert proc._pidfile is not None
        info = proc._pidfile.read_text().replace(f'"owner": {os.getpid()}', '"owner": 999999999')
        proc._pidfile.write_text(info)
        assert reap_leftovers() == [proc.proc.pid]
        proc.proc.wait(timeout=10)
    else:
        proc.stop(grace_s=2)
    _wait_for(lambda: _gone(daemon), timeout=10, what="the setsid daemon to be killed")


def test_a_port_clash_names_the_bind_failure_first(tmp_path: Path, llama_server_bin: str, _runtime_dir: Path) -> None:
    """A port taken between frank choosing it and the engine binding it: the error's first line named only the
    exit, and the log tail began with warnings (issue 30). The first line now carries the engine's own error."""
    from frankenstein.engines.process import EngineProcess
    from frankenstein.errors import EngineStartError
    from frankenstein.shipped import data_path

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = [llama_server_bin, "-m", str(data_path("tiny-target.gguf")), "--host", "127.0.0.1", "--port", str(port)]
        proc = EngineProcess([*argv, "--threads", "1", "--no-repack"], env={}, log_path=tmp_path / "e.log", name="e")
        proc.launch()
        try:
            with pytest.raises(EngineStartError) as err:
                proc.wait_ready(f"http://127.0.0.1:{port}/health", 60, lambda a: False)
        finally:
            proc.stop(grace_s=2)
    first = str(err.value).splitlines()[0]
    assert first.startswith("e exited with code 1 during start (log: ") and "couldn't bind HTTP server socket" in first


CLASH = """\
import sys
print("warning: --defrag-thold is deprecated: an invalid option in the next release", file=sys.stderr)
print("main: loading model", file=sys.stderr)
print(f"error: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: {sys.argv[1]}", file=sys.stderr)
sys.exit(1)
"""


def test_a_failed_start_names_the_bind_failure_not_a_deprecation_line(tmp_path: Path) -> None:
    """Issue 30: a port clash's reason started with the deprecation notice printed before it; the first line of
    the error names the line that says why (a real process whose log has both, through the real CLI). Nor is
    it frank's own launch line, though the script's folder has an error word in its name."""
    (tmp_path / "failed-runs").mkdir()
    script = tmp_path / "failed-runs" / "clash.py"
    script.write_text(CLASH)
    recipe = f'\n[recipes.clash]\nengine = "openai"\ncommand = ["{sys.executable}", "{script}", "{{port}}"]\n'
    c = make_campaign(tmp_path / "c", TOML + recipe)
    r = frank("engine", "check", "clash", "-c", str(c.root), "--requests", "1", timeout=120)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    first = r.stderr.splitlines()[0]
    assert first.startswith("frank: error: ") and " during start (log: " in first, first
    assert first.endswith("): error: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: " + first[-5:]), first
    assert "deprecated" not in first and "deprecated" in r.stderr  # the notice stays in the log tail shown
