"""frank run --ray without a cluster: Ray missing, a bad [cluster] table, an agent design; and the
workload travelling by content (no Ray cluster needed, the real CLI and real files)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from frankenstein.campaign import open_campaign
from frankenstein.cluster.content import unpack_workload
from frankenstein.design.registry import register
from frankenstein.errors import ClusterError

from helpers_campaign import make_campaign, make_workload, write_design

NO_RAY = "import sys; sys.modules['ray'] = None; from frankenstein.cli import main; main()"


def _frank_without_ray(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", NO_RAY, *args], capture_output=True, text=True, timeout=120, cwd=None)


def test_ray_missing_says_how_to_install_it(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl", turns=2)
    did = register(c, write_design(c.root / "d.toml", blocks=5)).design_id
    c.close()
    r = _frank_without_ray("run", did, "-c", str(c.root), "--ray", "auto")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "frank: error: frank run --ray needs Ray, which is not installed here: pip install 'frankenstein[ray]'"
    ]
    assert "Traceback" not in r.stderr and r.stdout == ""
    (c.root / "frank.toml").write_text((c.root / "frank.toml").read_text() + '\n[cluster]\nray = "auto"\n')
    again = _frank_without_ray("run", did, "-c", str(c.root))  # [cluster] ray in frank.toml asks for Ray too
    assert again.returncode == 1 and "pip install 'frankenstein[ray]'" in again.stderr
    assert "starts run" not in again.stdout


def test_a_bad_cluster_table_names_file_and_field(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    c.close()
    toml = c.root / "frank.toml"
    toml.write_text(toml.read_text() + '\n[cluster]\nray = "auto"\ngpu = 1\n')
    r = subprocess.run(
        [sys.executable, "-m", "frankenstein", "run", "x-1", "-c", str(c.root)], capture_output=True, text=True
    )
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert str(toml) in r.stderr and "cluster.gpu" in r.stderr


def test_the_workload_travels_by_content_and_is_checked_on_the_host(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl", turns=2)
    reg = register(c, write_design(c.root / "d.toml", blocks=5))
    data = (c.root / "workloads" / "w.jsonl").read_bytes()
    got = unpack_workload(data, reg, tmp_path / "host")
    assert got is not None and got.hash == reg.frozen.workload_hash and len(got.turns) == 2
    assert got.path is not None and got.path.parent == tmp_path / "host"
    tampered = data.replace(b"def parse", b"def parsE")
    with pytest.raises(ClusterError, match="hashes to .*, registered"):
        unpack_workload(tampered, reg, tmp_path / "host2")
    with pytest.raises(ClusterError, match="does not load"):
        unpack_workload(b"{not json\n", reg, tmp_path / "host3")


def test_a_cluster_that_does_not_answer_is_one_line_and_records_nothing(tmp_path: Path) -> None:
    from frankenstein.engines.process import free_port

    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl", turns=2)
    did = register(c, write_design(c.root / "d.toml", blocks=5)).design_id
    c.close()
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    r = subprocess.run(
        [sys.executable, "-m", "frankenstein", "run", did, "-c", str(c.root), "--ray", address],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        f"frank: error: cannot reach the Ray cluster at {address}: Connection refused"
    ]
    with open_campaign(c.root) as camp:
        assert camp.store.starts_of(did) == []


def test_ray_auto_is_resolved_and_checked_like_an_address(tmp_path: Path) -> None:
    """--ray auto resolves as Ray does (RAY_ADDRESS first) and the result is checked at once: nothing
    listening there is one line naming the address, and nothing is recorded."""
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'frankenstein[ray]')")
    from frankenstein.engines.process import free_port

    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl", turns=2)
    did = register(c, write_design(c.root / "d.toml", blocks=5)).design_id
    c.close()
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    r = subprocess.run(
        [sys.executable, "-m", "frankenstein", "run", did, "-c", str(c.root), "--ray", "auto"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "RAY_ADDRESS": address},
    )
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        f"frank: error: cannot reach the Ray cluster at {address}: Connection refused"
    ]
    with open_campaign(c.root) as camp:
        assert camp.store.starts_of(did) == []


def test_an_engine_starts_without_the_drivers_ray_variables_and_with_a_private_ray(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from frankenstein.engines.process import EngineProcess

    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    monkeypatch.setenv("RAY_JOB_ID", "01000000")
    engine = EngineProcess(["sh", "-c", "env"], env={"RAY_OWN": "kept"}, log_path=tmp_path / "env.log", name="env")
    engine.launch()
    assert engine.proc is not None and engine.proc.wait(timeout=30) == 0
    engine.stop()
    seen = [line.split("=", 1)[0] for line in (tmp_path / "env.log").read_text().splitlines()]
    assert "PATH" in seen and sorted(k for k in seen if k.startswith("RAY_")) == ["RAY_ADDRESS", "RAY_OWN"]
    env = dict(line.split("=", 1) for line in (tmp_path / "env.log").read_text().splitlines() if "=" in line)
    assert env["RAY_ADDRESS"] == "local" and env["RAY_OWN"] == "kept"  # a private Ray; the recipe's own env stays


def test_a_command_arms_group_dies_when_its_guard_is_sigkilled(tmp_path: Path) -> None:
    """What a Ray worker does when it exits: SIGKILL its direct child, the guard. The watcher the guard
    forked kills the arm's group (the arm and a grandchild it left running)."""
    import os
    import signal
    import time

    from frankenstein.design import command_guard
    from frankenstein.engines.process import group_members, wait_group_gone

    argv = [sys.executable, "-I", command_guard.__file__, str(os.getpid()), "--", "sh", "-c", "sleep 300 & sleep 300"]
    guard = subprocess.Popen(argv, start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while len(group_members(guard.pid)) < 4 and time.monotonic() < deadline:  # guard, watcher, sh, 2 sleeps
            time.sleep(0.02)
        assert len(group_members(guard.pid)) >= 4
        guard.send_signal(signal.SIGKILL)
        guard.wait()
        deadline = time.monotonic() + 10
        while group_members(guard.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert group_members(guard.pid) == []
    finally:
        os.killpg(guard.pid, signal.SIGKILL) if group_members(guard.pid) else None
        wait_group_gone(guard.pid)


def test_registration_pins_each_arms_files_and_a_host_copy_changed_since_is_refused(tmp_path: Path) -> None:
    """The files are pinned when the design is registered (in its hash), not when a run starts: a model
    file replaced after registration fails the start on the host, naming the host and the file."""
    from frankenstein.cluster import checks
    from frankenstein.design.registry import get
    from frankenstein.measure.machine import binary_sha256
    from frankenstein.shipped import data_path

    from helpers_campaign import TOML

    model = tmp_path / "model.gguf"
    model.write_bytes(data_path("tiny-target.gguf").read_bytes())
    c = make_campaign(tmp_path / "c", toml=TOML.replace('"pkg:tiny-target.gguf"', f'"{model}"'))
    make_workload(c.root / "workloads" / "w.jsonl", turns=2)
    reg = register(c, write_design(c.root / "d.toml", blocks=5, candidate_parts='["draft"]'))
    pinned = {(p["arm"], p["role"]): p for ps in reg.frozen.files.values() for p in ps}
    assert pinned["candidate", "model"]["sha256"] == binary_sha256(model)
    assert pinned["candidate", "draft model"]["path"].endswith("tiny-draft.gguf")
    assert pinned["served", "engine binary"]["sha256"]
    assert f'"sha256":"{binary_sha256(model)}"' in get(c, reg.design_id).frozen.model_dump_json().replace(" ", "")
    pins = checks.pin(reg, [])
    assert checks.check(pins, reg, "candidate", "host-a") is None

    model.write_bytes(model.read_bytes() + b"\0")  # the model replaced after registration
    assert checks.pin(reg, []) == pins  # the run still checks against what was registered
    why = checks.check(pins, reg, "candidate", "host-a")
    assert why is not None and why.startswith(f"host host-a: model {model} has sha256 ")
    assert "the design registered" in why
    c.close()


def test_a_block_that_died_before_its_host_reported_is_named_from_rays_error() -> None:
    """Ray's NodeDiedError names the node's id (this text is what Ray 2.60 said when a test killed a host);
    the node table, which keeps dead nodes, gives its name."""
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'frankenstein[ray]')")
    from frankenstein.cluster.driver import named_node

    node_id = "da458477cc0127edcb285cacee93dab1f95da88ad341934162ad7293"
    text = (
        "Task failed because the node it was running on is dead or unavailable. Node IP: 127.0.0.1, "
        f"node ID: {node_id}. This can happen if the node was preempted, had a hardware failure, or its raylet "
        "crashed unexpectedly."
    )
    nodes = [
        {"NodeID": "0" * 56, "NodeName": "a", "NodeManagerAddress": "127.0.0.1", "Alive": True},
        {"NodeID": node_id, "NodeName": "ws-b", "NodeManagerAddress": "10.0.0.2", "Alive": False},
    ]
    host = named_node(text, nodes)
    assert host is not None and (host.label, host.address, host.node_id) == ("ws-b", "10.0.0.2", node_id)
    unknown = named_node(text, nodes[:1])  # not in the table: its id, shortened, still names it
    assert unknown is not None and unknown.label == node_id[:12]
    assert named_node("The worker died unexpectedly while executing this task.", nodes) is None
