"""``frank cluster local``: a three-host loopback Ray cluster started by frank's own command, a design run on it,
and stopped again, leaving no process it did not start (a stand-in ``raylet`` outside it survives, which
``ray stop`` would kill) and nothing it did start, also after kill -9 of frank. And the warning that hosts
share one machine."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from frankenstein.campaign import open_campaign
from frankenstein.cluster.driver import shared_machines
from frankenstein.cluster.worker import set_by_ray

from conftest import frank
from helpers_campaign import make_campaign
from test_cluster import DESIGN, _need_namespaces

pytestmark = pytest.mark.ray

ARM = "import json, sys; print(json.dumps({'verify_step_ms': float(sys.argv[1])}))"


def _ray_pids_outside(netns: str) -> list[int]:
    """Live raylet/gcs_server processes in a network namespace other than ``netns``."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            comm = (p / "comm").read_text().strip()
            state = (p / "stat").read_text().rsplit(")", 1)[1].split()[0]
            ns = os.readlink(p / "ns" / "net")
        except OSError:
            continue
        if comm in ("raylet", "gcs_server") and state != "Z" and ns != netns:
            out.append(int(p.name))
    return out


@pytest.fixture
def stand_in_raylet(tmp_path: Path):
    """A process named ``raylet`` that frank did not start (a test double of someone else's Ray node: a copy of
    ``sleep``); ``ray stop`` kills processes by that name."""
    exe = tmp_path / "raylet"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", exe)
    proc = subprocess.Popen([str(exe), "600"])
    yield proc
    proc.kill()
    proc.wait()


def test_a_design_runs_on_three_local_hosts_and_nothing_is_left(tmp_path: Path, stand_in_raylet) -> None:
    _need_namespaces()
    root = make_campaign(tmp_path / "c").root
    served = json.dumps([sys.executable, "-c", ARM, "2.0"])
    candidate = json.dumps([sys.executable, "-c", ARM, "1.5"])
    (tmp_path / "d.toml").write_text(
        DESIGN.format(
            name="d", blocks=3, more="", served=served, candidate=candidate, rule="all_blocks_better", alpha=0.2
        )
    )
    assert frank("register", str(tmp_path / "d.toml"), "-c", str(root)).returncode == 0
    r = frank(
        "cluster", "local", "--hosts", "3", "--",
        sys.executable, "-m", "frankenstein", "run", "d-1", "-c", str(root), "--ray", "auto",
        timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "local Ray cluster: 3 host(s) at 127.0.0.1:" in r.stderr
    assert "warning: hosts host1, host2, host3 share one machine (127.0.0.1)" in r.stdout
    assert "d-1: 6 starts run, 0 already recorded" in r.stdout
    assert "local Ray cluster stopped:" in r.stderr and "nothing outside it" in r.stderr
    with open_campaign(root) as c:
        rows = c.store.starts_of("d-1")
    assert len(rows) == 6 and {str(row.resources["host"]["node"]) for row in rows} <= {"host1", "host2", "host3"}
    mine = os.readlink("/proc/self/ns/net")
    assert _ray_pids_outside(mine) == []  # every Ray process it started is gone
    assert stand_in_raylet.poll() is None  # and the one it did not start is alive
    if "OMP_NUM_THREADS" not in os.environ:  # Ray sets it on its workers: the note says it is Ray's setting
        assert all("OMP_NUM_THREADS" in row.resources.get("ray_env", []) for row in rows)
        note = frank("report", "-c", str(root), "--out", str(tmp_path / "note"))
        assert note.returncode == 0, note.stderr
        assert "OMP_NUM_THREADS=1 (set by Ray on its workers)" in (tmp_path / "note" / "note.md").read_text()


def test_set_by_ray_names_what_the_raylet_did_not_have() -> None:
    worker = {"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "0", "PATH": "/bin", "MKL_X": "2"}
    raylet = {"CUDA_VISIBLE_DEVICES": "0", "PATH": "/usr/bin", "MKL_X": "3"}
    assert set_by_ray(worker, raylet) == ["MKL_X", "OMP_NUM_THREADS"]


def test_kill_9_of_frank_stops_its_cluster(tmp_path: Path, stand_in_raylet) -> None:
    _need_namespaces()
    proc = subprocess.Popen(
        [sys.executable, "-m", "frankenstein", "cluster", "local", "--hosts", "1"],
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stderr is not None
        line = ""
        while "enter it" not in line:
            line = proc.stderr.readline()
            assert line, "frank cluster local ended before its cluster was up"
        mine = os.readlink("/proc/self/ns/net")
        assert _ray_pids_outside(mine), "no Ray node was started"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 30
        while _ray_pids_outside(mine) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _ray_pids_outside(mine) == []
        assert stand_in_raylet.poll() is None
    finally:
        if proc.poll() is None:
            proc.kill()


def test_hosts_on_one_machine_are_named() -> None:
    node = {"Alive": True, "Resources": {"frank_host": 1.0}}
    nodes = [
        {**node, "NodeName": "a", "NodeManagerAddress": "10.0.0.1"},
        {**node, "NodeName": "b", "NodeManagerAddress": "10.0.0.1"},
        {**node, "NodeName": "c", "NodeManagerAddress": "10.0.0.2"},
        {**node, "Alive": False, "NodeName": "d", "NodeManagerAddress": "10.0.0.2"},
        {"Alive": True, "Resources": {}, "NodeName": "laptop", "NodeManagerAddress": "10.0.0.2"},
    ]
    assert shared_machines(nodes) == [
        "warning: hosts a, b share one machine (10.0.0.1): blocks on them run at the same time on the same cores "
        "and memory, so their timings are not independent"
    ]
