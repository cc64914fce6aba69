"""The sandbox's minimal root has no way back to the host's Unix sockets: path sockets under the
host's /tmp, /dev/shm, /var/tmp and /run are not in it (those folders are fresh), no socket file is
visible anywhere in it, and the host's abstract sockets live in another network namespace.
Each listener is first reached from the host, so the probe is shown to work."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from frankenstein.agent.sandbox import Isolation, Sandbox, detect_isolation, python_paths
from frankenstein.agent.tasks import SandboxLimits

NS = detect_isolation()
MODES = [NS] + ([Isolation("userns")] if NS.mode == "root" else [])
pytestmark = pytest.mark.skipif(NS.mode == "none", reason=f"no namespaces on this machine: {NS.notes}")
PROBE = """
import socket, sys
for addr in sys.argv[1:]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(addr.replace("@", "\\0", 1))
        print("CONNECTED", addr)
    except OSError as e:
        print("blocked", addr, e.errno)
"""


@pytest.fixture
def listeners() -> Iterator[dict[str, socket.socket]]:
    tag = f"frank-sock-{os.getpid()}"
    paths = [f"/tmp/{tag}", f"/dev/shm/{tag}", f"/var/tmp/{tag}", f"/run/{tag}", f"@{tag}-abstract"]
    out: dict[str, socket.socket] = {}
    try:
        for p in paths:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(p.replace("@", "\0", 1))
            s.listen(8)
            s.setblocking(False)
            out[p] = s
        yield out
    finally:
        for p, s in out.items():
            s.close()
            if not p.startswith("@"):
                Path(p).unlink(missing_ok=True)


def _accepted(s: socket.socket) -> bool:
    try:
        conn, _ = s.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


@pytest.mark.parametrize("iso", MODES, ids=lambda i: i.mode)
def test_host_unix_sockets_are_out_of_reach(
    tmp_path: Path, listeners: dict[str, socket.socket], iso: Isolation
) -> None:
    for addr, server in listeners.items():  # the host reaches every one of them
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.connect(addr.replace("@", "\0", 1))
        assert _accepted(server), addr
    (tmp_path / "probe.py").write_text(PROBE)
    box = Sandbox(tmp_path, SandboxLimits(), isolation=iso)
    res = box.run("python probe.py " + " ".join(listeners), timeout_s=30)
    lines = res.output.splitlines()
    assert "CONNECTED" not in res.output, res.output
    assert sorted(ln.split()[1] for ln in lines if ln.startswith("blocked")) == sorted(listeners), res.output
    assert not any(_accepted(s) for s in listeners.values())


@pytest.mark.parametrize("iso", MODES, ids=lambda i: i.mode)
def test_the_root_is_minimal(tmp_path: Path, iso: Isolation) -> None:
    box = Sandbox(tmp_path, SandboxLimits(), isolation=iso)
    res = box.run(
        'for d in / /tmp /var/tmp /run /dev/shm; do echo "$d:"$(ls -A $d); done; echo ==; find / -path /proc -prune -o -type s -print '
        "2>/dev/null; echo ==; ls /home 2>&1",
        timeout_s=60,
    )
    tops, sockets, others = res.output.split("==\n")
    listing = dict(line.split(":", 1) for line in tops.splitlines())
    assert set(listing["/"].split()) <= {
        "bin",
        "dev",
        "etc",
        "lib",
        "lib32",
        "lib64",
        "libx32",
        "proc",
        "run",
        "sbin",
        "tmp",
        "usr",
        "var",
        *(p.split("/")[1] for p in python_paths()),
    }

    # Each fresh folder is empty (/tmp: the workspace), but for the way down to the tools' Python when it lives
    # below one of them (a checkout and its venv under /tmp, as a CI clone may be)
    def way_to_python(d: str) -> set[str]:
        return {str(p)[len(d) + 1 :].split("/")[0] for p in python_paths() if str(p).startswith(d + "/")}

    assert set(listing["/tmp"].split()) - way_to_python("/tmp") == {"workspace"}
    for d in ("/var/tmp", "/run", "/dev/shm"):
        assert set(listing[d].split()) <= way_to_python(d)
    assert sockets.strip() == ""  # no socket file anywhere in the sandbox's root
    assert "No such file or directory" in others  # no home folders
