"""``frank run``: for each block, each arm in its registered order: start, ready, warm-up, replay,
scrape, stop. Each start is written in one transaction; a rerun (``--resume``) continues at the first
unfinished start and never counts a start twice (the store's unique key on design/block/position/rep).
One runner per campaign: an exclusive ``flock`` on ``.run.lock`` (released by the kernel even after
``kill -9``).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import partial
from pathlib import Path

from frankenstein.campaign import Campaign
from frankenstein.design import command as command_arm
from frankenstein.design import registry
from frankenstein.design.kinds import kind_of
from frankenstein.design.kinds.base import Progress
from frankenstein.design.kinds.base import settled as kind_settled
from frankenstein.design.model import Registered, Slot
from frankenstein.design.start import StartOutcome, record_start, watched
from frankenstein.errors import DesignError, RunLockedError
from frankenstein.workload.trace import Workload, load_trace


@contextmanager
def run_lock(campaign: Campaign) -> Iterator[None]:
    path = campaign.root / ".run.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            raise RunLockedError(f"another runner (pid {holder}) is working on campaign {campaign.root}") from exc
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)


def done_slots(campaign: Campaign, design_id: str) -> set[tuple[int, int]]:
    return {(r.block, r.position) for r in campaign.store.starts_of(design_id)}


def run_command_arm(command: list[str], log_dir: Path) -> StartOutcome:
    """A command arm, reaped like an engine: own process group, parent-death guard, pid file
    (:mod:`frankenstein.design.command`)."""
    return command_arm.run_command_arm(command, log_dir)


def _run_slot(
    campaign: Campaign, reg: Registered, slot: Slot, workload: Workload | None, progress: Progress | None
) -> StartOutcome:
    spec = reg.design.arms[slot.arm]
    if spec.command is not None:
        return run_command_arm(spec.command, campaign.logs)
    recipe = reg.frozen.recipes[slot.arm]
    assert recipe is not None
    return kind_of(reg.design.kind).start(campaign, reg, slot, recipe, workload, progress)


def run_design(
    campaign: Campaign,
    design_id: str,
    *,
    resume: bool = False,
    echo: Callable[[str], None] = print,
    progress_factory: Callable[[str], AbstractContextManager[Progress | None]] | None = None,
) -> str:
    """Run every unfinished start of a registered design; returns a one-line summary."""
    reg = registry.get(campaign, design_id)
    kind = kind_of(reg.design.kind)
    with run_lock(campaign):
        done = done_slots(campaign, design_id)
        if done and not resume:
            raise DesignError(f"design {design_id} already has {len(done)} recorded starts; continue it with --resume")
        workload = None
        if reg.frozen.workload_path:
            workload = load_trace(reg.frozen.workload_path)
            if workload.hash != reg.frozen.workload_hash:
                raise DesignError(f"workload {reg.frozen.workload_path} changed since {design_id} was registered")
        todo = [s for s in reg.slots() if (s.block, s.position) not in done]
        ran = 0
        for slot in todo:
            if reg.design.stopping == "curtail" and kind.can_curtail and settled(campaign, reg, slot.block):
                echo(f"curtailed before block {slot.block + 1}: the registered verdict can no longer change")
                break
            label = f"block {slot.block + 1}/{reg.design.blocks} · {slot.arm}"
            ctx = progress_factory(label) if progress_factory else _null()
            with ctx as progress:
                out = watched(partial(_run_slot, campaign, reg, slot, workload, progress))
            record_start(
                campaign.store,
                out,
                design_id=design_id,
                block=slot.block,
                position=slot.position,
                rep=slot.rep,
                arm=slot.arm,
            )
            ran += 1
            echo(f"{label}: {out.status}{kind.start_value(reg, out)}" + (f" ({out.reason})" if out.reason else ""))
    return f"{design_id}: {ran} starts run, {len(done)} already recorded"


@contextmanager
def _null() -> Iterator[None]:
    yield None


def settled(campaign: Campaign, reg: Registered, next_block: int) -> bool:
    """Whether the verdict can no longer change, given the blocks before ``next_block`` (curtailment)."""
    return kind_settled(campaign, reg, next_block)
