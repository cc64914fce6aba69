"""The driver: ``frank run ID --ray ADDRESS``, the only writer of the store and the registry.

Blocks are submitted in block order, each as one Ray task asking for one ``frank_host`` (so a host runs
one block at a time) and the GPUs one block needs (``[cluster] gpus``); no more blocks are in flight
than the cluster has hosts. Each start is recorded as soon as its host sends it back. A block whose
task fails (its node died, its worker was killed) has its unfinished starts recorded as failed, naming
the node; the design's failure policy then decides at analysis, as for any failed start. Under
``stopping = "curtail"`` the driver checks before submitting each block whether the verdict is settled
over the blocks recorded so far (:func:`curtails_now`). The run lock and the store's unique key on
(design, block, position, rep) keep ``--resume`` from running a recorded start twice; Ray never retries
a block. When no host is left, the run stops saying how many starts were not run, blocks sent but never
taken by a host among them (Ray would keep those pending forever).
"""

from __future__ import annotations

import logging
import re
import socket
from collections import deque
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import ray
from ray._private import services as ray_services
from ray._private import worker as ray_worker
from ray.exceptions import RayError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from frankenstein.campaign import Campaign
from frankenstein.cluster import checks
from frankenstein.cluster.content import suite_bytes, workload_bytes, write_back
from frankenstein.design.failed import failed_start
from frankenstein.cluster.host import Host
from frankenstein.cluster.worker import run_block
from frankenstein.design import registry, rules
from frankenstein.design.kinds import kind_of
from frankenstein.design.kinds.base import arm_values, block_values, can_still_change, dropped_blocks
from frankenstein.design.model import Registered, Slot
from frankenstein.design.runner import (
    by_block,
    curtailed_line,
    record_slot,
    run_lock,
    slot_label,
    start_line,
    summary,
    unfinished,
)
from frankenstein.design.start import StartOutcome
from frankenstein.errors import ClusterError
from frankenstein.progress import RunProgress
from frankenstein.store import StartRow

RESOURCE = "frank_host"
WAIT_S = 2.0  # how often a driver waiting on its blocks looks whether any host is left
HOW_TO_ADD = f"start each host with `ray start ... --resources '{{\"{RESOURCE}\": 1}}'` (docs/cluster.md)"


@dataclass
class Flight:
    """One block in flight: its slots, how many came back, the host it reported."""

    slots: list[Slot]
    done: set[int] = field(default_factory=set)  # positions recorded
    host: Host | None = None


@dataclass
class Run:
    campaign: Campaign
    reg: Registered
    echo: Callable[[str], None]
    gpus: float
    workload: Any  # an ObjectRef of the workload's bytes, or None
    suite: Any  # an ObjectRef of the agent suite folder (hash, tar bytes), or None
    pins: list[checks.Pin]
    progress: RunProgress | None = None
    recorded_on: dict[int, str] = field(default_factory=dict)  # block -> node its recorded starts ran on
    flights: dict[Any, Flight] = field(default_factory=dict)
    ran: int = 0

    def note(self, text: str) -> None:
        if self.progress is not None:
            self.progress.note(text)

    def status(self) -> str:
        """The heartbeat's line: starts recorded, and each block in flight with its host and count back."""
        total = self.progress.total if self.progress is not None else 0
        flying = [
            f"block {f.slots[0].block + 1} on {f.host.label if f.host else 'a host not yet reported'} "
            f"({len(f.done)}/{len(f.slots)} back)"
            for f in self.flights.values()
        ]
        return f"{self.ran}/{total} starts recorded; in flight: {', '.join(flying) or 'none'}"

    def submit(self, slots: list[Slot]) -> None:
        block = slots[0].block
        strategy, where = self.placement(block)
        task = run_block.options(
            resources={RESOURCE: 1},
            num_gpus=self.gpus,
            max_retries=0,  # a block is never run again by Ray: its recorded starts would run twice
            retry_exceptions=False,
            name=f"frank {self.reg.design_id} block {block + 1}",
            scheduling_strategy=strategy,
        )
        self.flights[task.remote(self.reg, slots, self.workload, self.suite, self.pins)] = Flight(slots)
        self.note(f"block {block + 1} ({len(slots)} starts) sent to {where}")

    def placement(self, block: int) -> tuple[Any, str]:
        """Where a block may run: a resumed block whose recorded starts ran on a host still in the cluster
        goes back to it (so all its starts share a host); one whose host is gone runs anywhere (the note
        then says it ran on two hosts); any other block, anywhere."""
        name = self.recorded_on.get(block)
        if name is None:
            return "DEFAULT", "the cluster"
        node = live_node(name, ray.nodes())
        if node is None:
            return "DEFAULT", f"the cluster (its recorded starts ran on {name}, no longer in the cluster)"
        return NodeAffinitySchedulingStrategy(node, soft=False), f"{name}, where its recorded starts ran"

    def record(self, slot: Slot, out: StartOutcome, host: Host | None) -> None:
        record_slot(self.campaign, self.reg.design_id, slot, out)
        self.ran += 1
        on = f" [on {host.label}]" if host else ""
        self.echo(start_line(self.reg, slot, out) + on)
        if self.progress is not None:
            self.progress.recorded(slot_label(self.reg, slot) + on)

    def step(self) -> int:
        """Wait for the next thing any block sends back and record it; 0, or how many starts were waiting
        for a host when none was left. Such blocks would wait forever (Ray keeps a task pending until a node
        offers its resources): they are cancelled, never run, so ``--resume`` runs them."""
        ready: list[Any] = []
        while not ready:
            ready, _ = ray.wait(list(self.flights), num_returns=1, timeout=WAIT_S)
            if not ready and hosts(self.gpus) == 0 and all(f.host is None for f in self.flights.values()):
                waiting = sum(len(f.slots) for f in self.flights.values())
                for pending in self.flights:
                    ray.cancel(pending, force=True)
                self.flights.clear()
                return waiting
        gen: Any = ready[0]  # an ObjectRefGenerator: ray.wait answers with the one that has an item
        flight = self.flights[gen]
        try:
            item = ray.get(next(gen))
        except StopIteration:
            del self.flights[gen]
            self.lost(flight, ": its task ended before every start came back")
            return 0
        except RayError as exc:
            del self.flights[gen]
            if flight.host is None:  # it died before its host reported: Ray's error names the node's id
                flight.host = named_node(str(exc), ray.nodes())
            self.lost(flight, _why(exc))
            return 0
        if isinstance(item, Host):
            flight.host = item
            self.note(f"block {flight.slots[0].block + 1} runs on {item.label}")
            return 0
        slot, out, files = item
        write_back(files, self.campaign.root / "workloads")
        flight.done.add(slot.position)
        self.record(slot, out, flight.host)
        if len(flight.done) == len(flight.slots):
            del self.flights[gen]
        return 0

    def lost(self, flight: Flight, what: str) -> None:
        """Record the block's unfinished starts as failed, naming the node."""
        where = f"node {flight.host.label}" if flight.host else "the node it was placed on (it never reported)"
        host = flight.host.as_dict() if flight.host else None
        for slot in (s for s in flight.slots if s.position not in flight.done):
            self.record(slot, failed_start(self.reg, slot, f"{where}{what}", host), flight.host)


def hosts(gpus: float = 0.0) -> int:
    """How many blocks the cluster can hold now: per alive node, its ``frank_host`` count, capped by how
    many blocks of ``gpus`` GPUs its GPUs fit."""
    total = 0
    for node in ray.nodes():
        have = node.get("Resources", {}) if node.get("Alive") else {}
        slots = int(have.get(RESOURCE, 0))
        if gpus > 0:
            slots = min(slots, int(have.get("GPU", 0) // gpus))
        total += slots
    return total


def shared_machines(nodes: list[dict[str, Any]]) -> list[str]:
    """One warning per machine that holds two or more alive hosts (``frank_host`` nodes at one address): their
    blocks run at the same time on the same cores, so their timings are not independent of each other."""
    by_address: dict[str, list[str]] = {}
    for node in nodes:
        if node.get("Alive") and node.get("Resources", {}).get(RESOURCE):
            address = str(node.get("NodeManagerAddress") or "?")
            by_address.setdefault(address, []).append(str(node.get("NodeName") or node.get("NodeID", "?")[:12]))
    return [
        f"warning: hosts {', '.join(sorted(names))} share one machine ({address}): blocks on them run at the same "
        "time on the same cores and memory, so their timings are not independent"
        for address, names in sorted(by_address.items())
        if len(names) > 1
    ]


def connect(address: str) -> str:
    """Connect to the cluster at ``address`` (``auto`` resolved first); the address connected to."""
    address = resolve(address)
    reachable(address)
    _cluster_messages_to_stderr()
    try:
        ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False, namespace="frank")
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ClusterError(f"cannot reach the Ray cluster at {address}: {_first_line(exc)}") from exc
    return address


def resolve(address: str) -> str:
    """``auto`` as Ray itself resolves it (``RAY_ADDRESS``, else the address file of the last ``ray start``
    on this machine, else a running GCS), so that the reachability check and the messages name the real
    address; any other address unchanged."""
    if address != "auto":
        return address
    try:
        found = ray_services.get_ray_address_from_environment("auto", None)
    except ConnectionError as exc:
        raise ClusterError(
            "--ray auto found no Ray cluster here (no RAY_ADDRESS, no address file of a `ray start` on this "
            "machine, no running GCS): name the cluster, e.g. --ray HOST:6379"
        ) from exc
    if not found or found in ("auto", "local"):
        raise ClusterError(
            f"--ray auto resolved to {found!r} (RAY_ADDRESS?), not a cluster: name it, e.g. --ray HOST:6379"
        )
    return str(found)


def recorded_hosts(rows: list[StartRow]) -> dict[int, str]:
    """Per block, the node its recorded starts ran on (the first one recorded, for a block already split)."""
    out: dict[int, str] = {}
    for row in rows:
        host = row.resources.get("host")
        if isinstance(host, dict) and host.get("node"):
            out.setdefault(row.block, str(host["node"]))
    return out


def live_node(name: str, nodes: list[dict[str, Any]]) -> str | None:
    """The id of the alive node named ``name`` that offers ``frank_host``, or None."""
    for node in nodes:
        if node.get("Alive") and node.get("NodeName") == name and node.get("Resources", {}).get(RESOURCE):
            return str(node["NodeID"])
    return None


def run_on_cluster(
    campaign: Campaign,
    design_id: str,
    address: str,
    *,
    resume: bool = False,
    echo: Callable[[str], None] = print,
    gpus: float = 0.0,
    progress: RunProgress | None = None,
) -> str:
    """Run every unfinished start of a registered design on the Ray cluster at ``address``; ``progress``
    (its total the unfinished starts) gets a line per block sent and start recorded, and a heartbeat."""
    reg = registry.get(campaign, design_id)
    with run_lock(campaign):
        todo, recorded = unfinished(campaign, reg, resume)
        data, suite = workload_bytes(reg), suite_bytes(reg)
        rows = campaign.store.starts_of(design_id)
        pins = checks.pin(reg, rows)
        address = connect(address)
        try:
            n = hosts(gpus)
            if n < 1:
                need = f"{RESOURCE} with {gpus:g} GPU(s) ([cluster] gpus)" if gpus else RESOURCE
                raise ClusterError(f"no node of the Ray cluster at {address} offers {need}: {HOW_TO_ADD}")
            echo(f"{design_id}: {len(todo)} starts in {len(by_block(todo))} blocks on {n} host(s) of {address}")
            for line in shared_machines(ray.nodes()):
                echo(line)
            put = [ray.put(x) if x is not None else None for x in (data, suite)]
            run = Run(campaign, reg, echo, gpus, put[0], put[1], pins, progress, recorded_hosts(rows))
            with progress.heartbeat(run.status) if progress is not None else nullcontext():
                dispatch(run, by_block(todo))
        finally:
            ray.shutdown()
    return summary(design_id, run.ran, recorded)


def dispatch(run: Run, blocks: list[list[Slot]]) -> None:
    """Keep one block per host in flight, in block order, until every block came back or curtailment."""
    queue = deque(blocks)
    stopped = False
    try:
        while queue or run.flights:
            while queue and not stopped and len(run.flights) < hosts(run.gpus):
                if curtails_now(run.campaign, run.reg):
                    run.echo(curtailed_line(queue[0][0].block))
                    stopped = True
                    break
                run.submit(queue.popleft())
            if not run.flights:
                if queue and not stopped:
                    raise no_host_left(sum(len(b) for b in queue))
                return
            waiting = run.step()
            if waiting:
                raise no_host_left(waiting + (0 if stopped else sum(len(b) for b in queue)))
    finally:
        for gen in run.flights:
            ray.cancel(gen, force=True)


def no_host_left(starts: int) -> ClusterError:
    return ClusterError(
        f"no host of the cluster offers {RESOURCE} any more; {starts} starts not run "
        f"(frank run --resume continues them): {HOW_TO_ADD}"
    )


def reachable(address: str, timeout_s: float = 5.0) -> None:
    """Refuse at once a HOST:PORT where nothing listens (Ray itself would retry for minutes)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return  # not HOST:PORT (a ray:// client address): Ray's own connect says what is wrong
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ClusterError(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}") from exc


def _cluster_messages_to_stderr() -> None:
    """Ray prints the cluster's messages to a driver (a node marked dead) on stdout, where frank prints one
    line per start: send them to stderr with the progress lines."""
    original = ray_worker.print_to_stdstream
    if getattr(original, "frank_stderr", False):
        return

    def to_stderr(data: dict[str, Any], ignore_prefix: bool) -> None:
        original({**data, "is_err": True}, ignore_prefix)

    to_stderr.frank_stderr = True  # type: ignore[attr-defined]
    ray_worker.print_to_stdstream = to_stderr


def curtails_now(campaign: Campaign, reg: Registered) -> bool:
    """Curtailment with blocks in flight: whether the verdict can no longer change, over every block
    recorded so far in any order (blocks are exchangeable; the rule sees only their values) with every
    block not yet analysed or dropped, those in flight included, still to come. The stop is as sound as a
    local run's (the verdict it stops on cannot change); which blocks are recorded by then may differ."""
    if reg.design.stopping != "curtail" or not kind_of(reg.design.kind).can_curtail:
        return False
    served, candidate, _ = block_values(campaign, reg)
    done = sorted(b for b in served if b in candidate)
    dropped = dropped_blocks(reg, arm_values(campaign, reg, reg.design.primary_metric)[1])
    remaining = rules.remaining_blocks(reg.design.blocks, len(done), len(dropped))
    return not can_still_change(reg, [served[b] for b in done], [candidate[b] for b in done], remaining)


def named_node(text: str, nodes: list[dict[str, Any]]) -> Host | None:
    """The node a Ray error names (``node ID: <hex>``), from the cluster's node table (dead nodes stay in
    it), when its block died before its host reported; None when the error names none."""
    found = re.search(r"node ID: ([0-9a-f]{16,})", text)
    if found is None:
        return None
    info = next((n for n in nodes if n.get("NodeID") == found.group(1)), {})
    address = str(info.get("NodeManagerAddress") or "")
    name = str(info.get("NodeName") or address or found.group(1)[:12])
    return Host(node_id=found.group(1), node=name, hostname="", address=address)  # its hostname never came


def _why(exc: RayError) -> str:
    """What became of a block whose task failed: its node died, or our code raised on the host."""
    cause = getattr(exc, "cause", None)
    if isinstance(exc, RayTaskError) and isinstance(cause, BaseException):
        return f": the block's task raised {type(cause).__name__}: {_first_line(cause)}"
    return f" died mid-block ({type(exc).__name__}: {_first_line(exc)})"


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:300]
