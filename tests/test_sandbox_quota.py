"""The workspace quota as a file-system limit (issue 30): wherever the sandbox has namespaces the workspace
is a detached tmpfs of ``workspace_mb`` (made by frank as root, by a child in a user namespace otherwise), so one shell command can no longer write past it (the red team wrote
229 MB under an 8 MB per-file limit). Real jail, real commands, a real kill -9; episodes are driven by the
scripted model server (a TEST DOUBLE for the model) through the real loop, sandbox and grader."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from frankenstein.agent.sandbox import CHECKED, TMPFS, Isolation, Sandbox, ToolRefused, detect_isolation
from frankenstein.agent import tmpfs as tmpfs_module
from frankenstein.agent.scripted import call
from frankenstein.agent.tasks import SandboxLimits
from frankenstein.errors import SandboxError
from tests.test_sandbox import episode, pids_with, tool_results

NS = detect_isolation()
pytestmark = pytest.mark.skipif(NS.quota != TMPFS, reason=f"no tmpfs workspace here: {NS.quota_note}")
MiB = 1 << 20
# Both ways of making the tmpfs: frank's own (root) and a child's in a user namespace (userns, also run here)
TMPFS_MODES = [pytest.param(NS, id=NS.mode)] + (
    [pytest.param(Isolation("userns", quota=TMPFS), id="userns")] if NS.mode == "root" else []
)


def test_this_machine_gives_a_tmpfs_workspace() -> None:
    """As root the probe finds the tmpfs; the isolation says so and why not elsewhere."""
    assert (NS.mode, NS.quota, NS.quota_note) == ("root", TMPFS, "")
    assert NS.quota_words(4) == "tmpfs 4 MB"
    assert Isolation("none").quota_words(4) == "4 MB checked after each tool call"


@pytest.mark.parametrize("iso", TMPFS_MODES)
def test_a_command_writing_3x_the_quota_gets_no_space(tmp_path: Path, iso: Isolation) -> None:
    """``head -c 12M`` into a 4 MB workspace fails inside the command, and the workspace never holds more
    than 4 MiB (statvfs of the tmpfs and the bytes on it)."""
    with Sandbox(tmp_path, SandboxLimits(workspace_mb=4), isolation=iso) as box:
        res = box.run("head -c 12M /dev/zero > big; echo rc=$?; head -c 12M /dev/zero > more; echo rc=$?", 20)
        vfs = os.statvfs(box.workspace)
        used = (vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize
        held = box.workspace_bytes()
    assert res.output.count("No space left on device") == 2 and res.output.count("rc=1") == 2, res.output
    assert vfs.f_blocks * vfs.f_frsize == 4 * MiB
    assert used <= 4 * MiB and held <= 4 * MiB
    assert (tmp_path / "big").stat().st_size + (tmp_path / "more").stat().st_size <= 4 * MiB


def test_empty_files_stop_at_the_inode_limit(tmp_path: Path) -> None:
    """Empty files take no bytes but do take inodes: ``nr_inodes`` (1,024 for 4 MB) bounds them too."""
    with Sandbox(tmp_path, SandboxLimits(workspace_mb=4), isolation=NS) as box:
        res = box.run("for i in $(seq 3000); do : > f$i || { echo stopped at $i; break; }; done 2>&1 | tail -1", 30)
        files = len(os.listdir(box.workspace))
    assert res.output.startswith("stopped at "), res.output
    assert files <= 1024


def test_the_private_tmp_has_an_inode_limit_too(tmp_path: Path) -> None:
    """``/tmp`` (and ``/var/tmp``, ``/run``, ``/dev/shm``) had only a size: empty files there were bounded
    by nothing but the kernel's memory. Now ``nr_inodes`` follows ``tmp_mb`` as the workspace's does."""
    with Sandbox(tmp_path, SandboxLimits(tmp_mb=4), isolation=NS) as box:
        res = box.run(
            "for i in $(seq 3000); do : > /tmp/f$i || { echo stopped at $i; break; }; done 2>&1 | tail -1", 30
        )
    assert res.output.startswith("stopped at ") and int(res.output.split()[2]) <= 1024, res.output


def test_the_per_file_limit_still_applies(tmp_path: Path) -> None:
    with Sandbox(tmp_path, SandboxLimits(workspace_mb=4, file_size_mb=1), isolation=NS) as box:
        res = box.run("head -c 2M /dev/zero > f; echo rc=$?", 20)
    assert "rc=153" in res.output or "File too large" in res.output, res.output  # SIGXFSZ
    assert (tmp_path / "f").stat().st_size <= MiB


@pytest.mark.parametrize("iso", TMPFS_MODES)
def test_the_command_holds_no_descriptor_of_the_tmpfs(tmp_path: Path, iso: Isolation) -> None:
    """The descriptor the jail binds the workspace from is closed before the command starts."""
    with Sandbox(tmp_path, SandboxLimits(workspace_mb=4), isolation=iso) as box:
        res = box.run("ls /proc/self/fd", 20)
    assert res.output.split() == ["0", "1", "2", "3"]  # stdin, stdout, stderr, and ls's own listing


def test_file_tools_follow_links_as_the_command_sees_them_and_never_out(tmp_path: Path) -> None:
    """The tmpfs is reached through /proc/self/fd, so paths are resolved by hand: an absolute link into
    /tmp/workspace stays inside; a link to /etc, to the host's /proc/self/fd or up past the root is refused."""
    links = "mkdir sub && echo inside > sub/x.txt && ln -s /tmp/workspace/sub in && ln -s /etc etc"
    links += " && ln -s /proc/self/fd fds && ln -s ../../../.. up && ln -s sub/../../x out"
    with Sandbox(tmp_path, SandboxLimits(workspace_mb=4), isolation=NS) as box:
        assert box.run(links, 20).rc == 0
        assert box.read_file("in/x.txt") == "inside\n"
        assert box.write_file("in/y.txt", "new") == 3 and box.read_file("sub/y.txt") == "new"
        for bad in ("etc/passwd", "fds/0", "up/etc/passwd", "out", "/tmp/workspace/etc/hostname"):
            with pytest.raises(ToolRefused, match="resolves outside the workspace"):
                box.resolve(bad)
        with pytest.raises(ToolRefused, match=r"^/etc/passwd: outside the workspace \(/tmp/workspace\)$"):
            box.read_file("/etc/passwd")


def test_a_tmpfs_without_namespaces_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="a tmpfs workspace needs namespaces"):
        Sandbox(tmp_path, SandboxLimits(), isolation=Isolation("none", quota=TMPFS))


def test_a_seed_larger_than_the_quota_is_refused(tmp_path: Path) -> None:
    (tmp_path / "data.bin").write_bytes(b"\0" * (2 * MiB))
    with pytest.raises(SandboxError, match=r"^the task's workspace does not fit its quota of 1 MB$"):
        Sandbox(tmp_path, SandboxLimits(workspace_mb=1), isolation=NS)
    assert (tmp_path / "data.bin").stat().st_size == 2 * MiB  # the episode's folder is untouched


@pytest.mark.parametrize("iso", TMPFS_MODES)
def test_write_file_past_the_quota_is_a_tool_error_and_the_episode_goes_on(tmp_path: Path, iso: Isolation) -> None:
    steps = [
        call("bash", command="head -c 12M /dev/zero > big; echo rc=$?"),
        call("write_file", path="b.txt", content="x" * 102400),
        call("bash", command="rm big"),
        call("write_file", path="answer.txt", content="42"),
    ]
    res, requests = episode(tmp_path, steps, iso, "[sandbox]\nworkspace_mb = 4\n")
    told = tool_results(requests)
    assert "No space left on device" in told[0] and told[0].endswith("rc=1\n")
    assert (
        told[1]
        == "error: b.txt: no space left: the workspace is full (its quota: tmpfs 4 MB) (the file was left empty)"
    )
    assert told[2:] == ["exit code: 0\n", "wrote 2 bytes to answer.txt"]
    assert (res.status, res.passed) == ("submitted", True), res.detail
    assert res.detail["sandbox"]["workspace_quota"] == "tmpfs 4 MB"
    workspace = tmp_path / "work" / "box-d0" / "workspace"  # what the agent left, copied back
    assert sorted(p.name for p in workspace.iterdir()) == ["README.md", "answer.txt", "b.txt"]
    assert (workspace / "b.txt").stat().st_size == 0


def host_bytes(folder: Path) -> int:
    """Bytes a folder takes on the host's disk, each inode once."""
    seen = {(p.lstat().st_ino, p.lstat().st_blocks) for p in folder.rglob("*")}
    return sum(blocks * 512 for _, blocks in seen)


def test_the_copy_back_is_bounded_by_the_quota(tmp_path: Path) -> None:
    """Hard links and holes take no room in the tmpfs: one 3 MB file linked 200 times and a 60 MB sparse
    file came back as 663 MB on the host. Now links stay links, holes stay holes, folders past 64 levels
    and a FIFO are left behind and counted, and the host folder takes no more than the quota."""
    deep = "/".join(["d"] * 80)
    command = (
        "head -c 3M /dev/urandom > one; for i in $(seq 200); do ln one l$i; done; truncate -s 60M sparse; "
        f"mkdir -p {deep} && echo deep > {deep}/x; mkfifo fifo; echo done"
    )
    with Sandbox(tmp_path, SandboxLimits(workspace_mb=4), isolation=NS) as box:
        assert box.run(command, 30).output == "done\n"
    assert box.left_behind == 2  # the 65th level of d/ and the FIFO
    assert host_bytes(tmp_path) <= 4 * MiB
    assert (tmp_path / "l200").stat().st_ino == (tmp_path / "one").stat().st_ino
    assert (tmp_path / "one").stat().st_nlink == 201 and (tmp_path / "sparse").stat().st_size == 60 * MiB
    assert (tmp_path / "/".join(["d"] * 64)).is_dir() and not (tmp_path / "/".join(["d"] * 65)).exists()
    assert box.record()["not_copied_back"] == 2


HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from frankenstein.agent.sandbox import Isolation, Sandbox
    from frankenstein.agent.tasks import SandboxLimits
    box = Sandbox(Path(sys.argv[1]), SandboxLimits(workspace_mb=4), isolation=Isolation(sys.argv[2], quota="tmpfs"))
    print(box.run("head -c 1M /dev/zero > held; echo $?", 20).output.strip(), box.root_fd, flush=True)
    time.sleep(600)
    """
)


@pytest.mark.parametrize("iso", TMPFS_MODES)
def test_kill_9_of_the_holder_leaves_no_mount(tmp_path: Path, iso: Isolation) -> None:
    """The tmpfs is never in a mount table: while a process holds it, it is a 4 MiB tmpfs behind that
    process's descriptor; after ``kill -9`` of the process there is nothing to unmount or sweep."""
    before = Path("/proc/self/mountinfo").read_text()
    argv = [sys.executable, "-c", HOLDER, str(tmp_path), iso.mode]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        rc, fd = proc.stdout.readline().split()
        held = os.statvfs(f"/proc/{proc.pid}/fd/{fd}")
        assert rc == "0" and held.f_blocks * held.f_frsize == 4 * MiB
        assert os.path.getsize(f"/proc/{proc.pid}/fd/{fd}/held") == MiB
        assert Path(f"/proc/{proc.pid}/mountinfo").read_text() == before
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert Path("/proc/self/mountinfo").read_text() == before
    assert os.listdir(tmp_path) == []  # never copied back: the kill came first, and nothing was left mounted here


RUNNER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from frankenstein.agent.sandbox import Sandbox, detect_isolation
    from frankenstein.agent.tasks import SandboxLimits
    box = Sandbox(Path(sys.argv[1]), SandboxLimits(workspace_mb=4), isolation=detect_isolation())
    print(box.root_fd, flush=True)
    box.run("head -c 1M /dev/zero > held; sleep 1000; echo " + sys.argv[2], 600)
    """
)


def test_kill_9_during_a_command_ends_the_command_and_its_tmpfs(tmp_path: Path) -> None:
    """The launcher dies with frank and PID 1 with the launcher: a command running at ``kill -9`` had
    kept its processes (and so the tmpfs its namespace binds) alive for good."""
    marker = f"quota-{os.getpid()}-{time.monotonic_ns()}"
    proc = subprocess.Popen([sys.executable, "-c", RUNNER, str(tmp_path), marker], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        fd = proc.stdout.readline().strip()
        jailed = lambda: sorted(set(pids_with(marker)) - {proc.pid})  # noqa: E731  (the launcher and the shell)
        assert wait_for(lambda: os.path.exists(f"/proc/{proc.pid}/fd/{fd}/held") and len(jailed()) == 2)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert wait_for(lambda: jailed() == []), jailed()


def wait_for(done: Callable[[], bool], limit_s: float = 10.0) -> bool:
    """Poll for an event that comes a moment later (a process starting, a SIGKILL taking effect)."""
    end = time.monotonic() + limit_s
    while not done():
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


@pytest.mark.parametrize("iso", [Isolation(NS.mode, quota=CHECKED), Isolation("none")], ids=["root-checked", "none"])
def test_without_a_tmpfs_the_quota_is_checked_and_says_so(tmp_path: Path, iso: Isolation) -> None:
    """Where no tmpfs can be made the checked total stays, and the record says which quota was in force."""
    steps = [call("bash", command="head -c 3000000 /dev/zero > a")]
    res, _ = episode(tmp_path, steps, iso, "[sandbox]\nworkspace_mb = 1\n")
    assert (res.status, res.detail["stop_reason"]) == (
        "workspace_limit",
        "the workspace holds more than its quota of 1 MB",
    )
    assert res.detail["sandbox"]["workspace_quota"] == "1 MB checked after each tool call"


SYSTEM_PYTHON = "/usr/bin/python3"  # readable by any user, unlike our venv's interpreter under /root


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv") or not Path(SYSTEM_PYTHON).exists(),
    reason="needs root to drop to nobody with setpriv, and a system python3 nobody can run",
)
def test_the_tmpfs_maker_needs_no_root() -> None:
    """``tmpfs.py`` run as a script by ``nobody`` (uid 65534, no capabilities) hands back a 4 MiB tmpfs that
    nobody owns: the userns path works for a frank that is not root."""
    folder = Path(tempfile.mkdtemp(prefix="frank-maker-"))
    try:
        folder.chmod(0o755)
        script = Path(shutil.copy(tmpfs_module.__file__, folder / "tmpfs.py"))
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with ours, theirs:
            drop = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
            argv = [*drop, SYSTEM_PYTHON, "-I", "-S", str(script), "4", str(theirs.fileno())]
            done = subprocess.run(argv, pass_fds=(theirs.fileno(),), capture_output=True, text=True, timeout=30)
            assert done.returncode == 0, done.stderr
            _, [fd], _, _ = socket.recv_fds(ours, 1, 1)
        try:
            root, vfs = os.fstat(fd), os.fstatvfs(fd)
        finally:
            os.close(fd)
        assert (root.st_uid, root.st_gid) == (65534, 65534)
        assert vfs.f_blocks * vfs.f_frsize == 4 * MiB and vfs.f_files == 1024
    finally:
        shutil.rmtree(folder)
