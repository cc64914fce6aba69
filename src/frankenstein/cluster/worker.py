"""The Ray task of one block: its starts in registered arm order on this host, streamed back one by one.

The task yields this host first, then ``(slot, outcome)`` after each start, so the driver records every
start as soon as it ends (a node that dies mid-block loses only the starts it had not finished). The
starts run through the local runner's own code (:func:`frankenstein.design.runner.block_starts`), in a
scratch campaign folder on this host (``$FRANK_WORKER_DIR``, default ``~/.cache/frankenstein/worker``)
that holds the engines' logs; its store is never written: the driver's is the only one.

Engines and command arms are reaped as on one machine: own process group, parent-death signal on this
Ray worker process. When the driver dies, Ray ends the job's workers, and so their engines.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import ray

from frankenstein.campaign import init_campaign
from frankenstein.cluster import checks
from frankenstein.cluster.content import Folder, listing, new_files, unpack_folder, unpack_workload, with_suite
from frankenstein.design.failed import failed_start
from frankenstein.cluster.host import Host, this_host
from frankenstein.design.model import Registered, Slot
from frankenstein.design.runner import block_starts
from frankenstein.design.start import StartOutcome
from frankenstein.engines.process import LIBRARY_SETTINGS, reap_leftovers
from frankenstein.errors import ClusterError

Item = Host | tuple[Slot, StartOutcome, dict[str, bytes]]


def worker_root() -> Path:
    return Path(os.environ.get("FRANK_WORKER_DIR") or Path.home() / ".cache" / "frankenstein" / "worker")


def _refuse(pins: list[checks.Pin], reg: Registered, host: Host, slot: Slot) -> StartOutcome | None:
    reason = checks.check(pins, reg, slot.arm, host.label)
    return None if reason is None else failed_start(reg, slot, reason)


def block_items(
    reg: Registered, slots: list[Slot], workload: bytes | None, suite: Folder | None, pins: list[checks.Pin]
) -> Iterator[Item]:
    """This host, then each start of the block as it ends, with the files it wrote into ``workloads/``
    (the body of :func:`run_block`)."""
    host = this_host()
    yield host
    reap_leftovers()  # groups a worker killed before this one left behind (their pid files name a dead owner)
    campaign = init_campaign(worker_root() / reg.design_id)
    try:
        try:
            wl = unpack_workload(workload, reg, worker_root() / "sent")
            here = with_suite(reg, unpack_folder(suite, worker_root() / "suites")) if suite is not None else reg
        except ClusterError as exc:
            for slot in slots:
                yield _stamped(failed_start(reg, slot, f"host {host.label}: {exc}"), host, pins, slot, {})
            return
        written = campaign.root / "workloads"
        before = listing(written)
        for slot, out in block_starts(campaign, here, slots, wl, check=partial(_refuse, pins, here, host)):
            files = new_files(written, before)
            before = listing(written)
            yield _stamped(out, host, pins, slot, files)
    finally:
        campaign.close()


def _stamped(
    out: StartOutcome, host: Host, pins: list[checks.Pin], slot: Slot, files: dict[str, bytes]
) -> tuple[Slot, StartOutcome, dict[str, bytes]]:
    out.resources["host"] = host.as_dict()
    out.resources["pins"] = checks.pins_of(pins, slot.arm)
    if by_ray := set_by_ray():
        out.resources["ray_env"] = by_ray
    return slot, out, files


def set_by_ray(environ: dict[str, str] | None = None, raylet: dict[str, str] | None = None) -> list[str]:
    """The library setting variables (``OMP_NUM_THREADS``...) this Ray worker has and its raylet (the process that
    started it) has not, or has with another value: Ray set them on its workers (it sets ``OMP_NUM_THREADS=1`` when
    unset), so the note names them as Ray's, not the user's shell's."""
    mine = dict(os.environ) if environ is None else environ
    parent = _environ_of(os.getppid()) if raylet is None else raylet
    return sorted(k for k, v in mine.items() if k.startswith(LIBRARY_SETTINGS) and parent.get(k) != v)


def _environ_of(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.decode(errors="replace").partition("=") for item in raw.split(b"\0") if item)
    return {k: v for k, _, v in pairs}


@ray.remote(max_retries=0, num_cpus=0)
def run_block(
    reg: Registered, slots: list[Slot], workload: bytes | None, suite: Folder | None, pins: list[checks.Pin]
) -> Iterator[Item]:
    """One block on the host Ray placed it on (never retried: a start is never run twice)."""
    yield from block_items(reg, slots, workload, suite, pins)
