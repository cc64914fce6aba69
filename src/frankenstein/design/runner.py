"""``frank run``: for each block, each arm in its registered order: start, ready, warm-up, replay,
scrape, stop. Each start is written in one transaction; a rerun (``--resume``) continues at the first
unfinished start and never counts a start twice (the store's unique key on design/block/position/rep).
One runner per campaign: an exclusive ``flock`` on ``.run.lock`` (released by the kernel even after
``kill -9``).
"""

from __future__ import annotations

import fcntl
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import partial
from pathlib import Path

from frankenstein.campaign import Campaign
from frankenstein.design import command as command_arm
from frankenstein.design import registry
from frankenstein.design.caches import around_slot
from frankenstein.design.failed import failed_start
from frankenstein.design.kinds import kind_of
from frankenstein.design.kinds.base import Progress
from frankenstein.design.kinds.base import settled as kind_settled
from frankenstein.design.model import Registered, Slot
from frankenstein.design.pins import check_arm, registered
from frankenstein.design.start import RESUMED, StartOutcome, record_start, watched
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


def run_command_arm(command: list[str], log_dir: Path, rss: bool = False) -> StartOutcome:
    """A command arm, reaped like an engine: own process group, parent-death guard, pid file
    (:mod:`frankenstein.design.command`); ``rss``: its process tree's peak RSS sampled (a memory design)."""
    return command_arm.run_command_arm(command, log_dir, rss=rss)


def _run_slot(
    campaign: Campaign, reg: Registered, slot: Slot, workload: Workload | None, progress: Progress | None
) -> StartOutcome:
    spec = reg.design.arms[slot.arm]
    if spec.command is not None:
        return run_command_arm(spec.command, campaign.logs, rss=kind_of(reg.design.kind).measures_memory)
    recipe = reg.frozen.recipes[slot.arm]
    assert recipe is not None
    return kind_of(reg.design.kind).start(campaign, reg, slot, recipe, workload, progress)


ProgressFactory = Callable[[str], AbstractContextManager[Progress | None]]
Check = Callable[[Slot], StartOutcome | None]


def slot_label(reg: Registered, slot: Slot) -> str:
    return f"block {slot.block + 1}/{reg.design.blocks} · {slot.arm}"


def run_slot(
    campaign: Campaign,
    reg: Registered,
    slot: Slot,
    workload: Workload | None,
    progress_factory: ProgressFactory | None = None,
) -> StartOutcome:
    """One start of a registered slot, watched (machine, load, NVML): the per-start code of every runner."""
    ctx = progress_factory(slot_label(reg, slot)) if progress_factory else _null()
    with ctx as progress, around_slot(campaign, reg, slot):  # phases, cache folders, prefetch (design/caches.py)
        return watched(partial(_run_slot, campaign, reg, slot, workload, progress))


def block_starts(
    campaign: Campaign,
    reg: Registered,
    slots: list[Slot],
    workload: Workload | None,
    *,
    progress_factory: ProgressFactory | None = None,
    check: Check | None = None,
) -> Iterator[tuple[Slot, StartOutcome]]:
    """The starts of one block in registered arm order, each yielded as soon as it ends (the caller
    records it before the next one runs). ``check(slot)`` may refuse a start before it runs by returning
    its failed outcome (a cluster worker checks the host's files). Used by :func:`run_design` and by the
    cluster worker (:mod:`frankenstein.cluster.worker`)."""
    for slot in slots:
        refused = check(slot) if check else None
        yield slot, refused if refused is not None else run_slot(campaign, reg, slot, workload, progress_factory)


def record_slot(campaign: Campaign, design_id: str, slot: Slot, out: StartOutcome) -> int:
    """Write one start of a registered slot (the store's unique key refuses a slot recorded twice)."""
    return record_start(
        campaign.store,
        out,
        design_id=design_id,
        block=slot.block,
        position=slot.position,
        rep=slot.rep,
        arm=slot.arm,
    )


def start_line(reg: Registered, slot: Slot, out: StartOutcome) -> str:
    """What a runner prints after a start."""
    value = kind_of(reg.design.kind).start_value(reg, out)
    return f"{slot_label(reg, slot)}: {out.status}{value}" + (f" ({out.reason})" if out.reason else "")


def pinned_workload(reg: Registered) -> Workload | None:
    """The registered workload, refused when it no longer hashes to the registered value."""
    if not reg.frozen.workload_path:
        return None
    workload = load_trace(reg.frozen.workload_path)
    if workload.hash != reg.frozen.workload_hash:
        raise DesignError(f"workload {reg.frozen.workload_path} changed since {reg.design_id} was registered")
    return workload


def unfinished(campaign: Campaign, reg: Registered, resume: bool) -> tuple[list[Slot], int]:
    """The slots still to run, in registered order, and how many are recorded (refused without ``resume``)."""
    done = done_slots(campaign, reg.design_id)
    if done and not resume:
        raise DesignError(f"design {reg.design_id} already has {len(done)} recorded starts; continue it with --resume")
    return [s for s in reg.slots() if (s.block, s.position) not in done], len(done)


def by_block(slots: list[Slot]) -> list[list[Slot]]:
    """Slots grouped by block, blocks and slots in registered order."""
    groups: dict[int, list[Slot]] = {}
    for slot in slots:
        groups.setdefault(slot.block, []).append(slot)
    return [groups[b] for b in sorted(groups)]


def pinned_files_check(reg: Registered) -> Check | None:
    """Before each start, the files registration pinned (``frozen.files``) must still hash as registered on
    this machine, as on a cluster host: a missing or changed model, draft or engine binary is a failed start
    naming the file. None for a design registered before registration pinned files."""
    if not reg.frozen.files:
        return None
    pins, host = registered(reg.frozen.files), socket.gethostname()

    def check(slot: Slot) -> StartOutcome | None:
        recipe, command = reg.frozen.recipes[slot.arm], reg.design.arms[slot.arm].command
        why = check_arm(pins, recipe, slot.arm, host, "the design registered", command)
        return None if why is None else failed_start(reg, slot, why)

    return check


def curtails(campaign: Campaign, reg: Registered, next_block: int) -> bool:
    """Whether a curtailing design stops before ``next_block`` (the kind allows it and the verdict is settled)."""
    kind = kind_of(reg.design.kind)
    return reg.design.stopping == "curtail" and kind.can_curtail and settled(campaign, reg, next_block)


def curtailed_line(next_block: int) -> str:
    return f"curtailed before block {next_block + 1}: the registered verdict can no longer change"


def run_design(
    campaign: Campaign,
    design_id: str,
    *,
    resume: bool = False,
    echo: Callable[[str], None] = print,
    progress_factory: ProgressFactory | None = None,
) -> str:
    """Run every unfinished start of a registered design; returns a one-line summary."""
    reg = registry.get(campaign, design_id)
    with run_lock(campaign):
        todo, recorded = unfinished(campaign, reg, resume)
        workload = pinned_workload(reg)
        check = pinned_files_check(reg)
        begun = {b for b, _ in done_slots(campaign, design_id)}  # blocks a resumed run finishes: not back to back
        ran = 0
        for block in by_block(todo):
            if curtails(campaign, reg, block[0].block):
                echo(curtailed_line(block[0].block))
                break
            for slot, out in block_starts(
                campaign, reg, block, workload, progress_factory=progress_factory, check=check
            ):
                if slot.block in begun:
                    out.resources[RESUMED] = True
                record_slot(campaign, design_id, slot, out)
                ran += 1
                echo(start_line(reg, slot, out))
    return summary(design_id, ran, recorded)


def summary(design_id: str, ran: int, recorded: int) -> str:
    return f"{design_id}: {ran} starts run, {recorded} already recorded"


@contextmanager
def _null() -> Iterator[None]:
    yield None


def settled(campaign: Campaign, reg: Registered, next_block: int) -> bool:
    """Whether the verdict can no longer change, given the blocks before ``next_block`` (curtailment)."""
    return kind_settled(campaign, reg, next_block)
