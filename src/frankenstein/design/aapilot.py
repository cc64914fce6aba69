"""``frank plan DESIGN.toml --run-pilot``: the A/A pilot a design file is planned from, built, registered and run.

The pilot is the design's served arm against itself (kind ``aa``): the same recipe (or command), workload,
replay settings (so the same ``max_turns`` slice and warm-up), primary metric, direction and cache policy,
``blocks`` blocks (3 by default: the fewest whose sd has a usable upper bound, docs/designs.md), rule
``sign`` at alpha 0.5 (reachable from 1 block; an A/A verdict is only a check, the pilot is read for its
phases and spread). Its source is written to ``designs/pilots/NAME-aa-pilot.toml`` and registered like any
design, so it sits on the chained record and is verified with the rest. A registered A/A design of the same
frozen recipes, pinned files, workload hash, replay settings and metric is reused when finished and resumed
when not (one with a failed start is never reused), unless ``fresh``.

    prepare_pilot(campaign, design_path, blocks=3, fresh=False) -> Pilot
    run_pilot(campaign, pilot, echo=..., progress_factory=...) -> PilotRun
    pilot_line(run) -> str
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from frankenstein.campaign import Campaign
from frankenstein.design.budget import first_line
from frankenstein.design.kinds import kind_of
from frankenstein.design.kinds.speed import SpeedKind
from frankenstein.design.model import DesignFile, FrozenDesign, Registered, Slot, load_design
from frankenstein.design.registry import check_design, get, inside, register, resolve_arm
from frankenstein.design.runner import ProgressFactory, run_design, unfinished
from frankenstein.design.timespent import duration
from frankenstein.errors import DesignError

DEFAULT_BLOCKS = 3
PILOT_ALPHA = 0.5  # the sign test's p at one block: any pilot size registers
SUFFIX = "-aa-pilot"
NAME_LIMIT = 64  # config.check_name
How = Literal["run now", "reused", "resumed"]


@dataclass(frozen=True)
class Pilot:
    """The pilot to plan from: registered (now, or earlier and found), with the starts it still has to run."""

    reg: Registered
    todo: list[Slot]
    how: How
    source: Path  # the design file it is the pilot of


@dataclass(frozen=True)
class PilotRun:
    design_id: str
    blocks: int
    how: How
    seconds: float  # the run's wall time here (0 when reused)
    registered_at: str


def pilot_document(design: DesignFile, path: Path, blocks: int) -> dict[str, Any]:
    """The A/A design of ``design``'s served arm, as the TOML document it is written as."""
    served = design.arms["served"].model_dump(mode="json", exclude_none=True)
    doc: dict[str, Any] = {
        "name": design.name[: NAME_LIMIT - len(SUFFIX)] + SUFFIX,
        "kind": "aa",
        "hypothesis": f"A/A pilot of {path}'s served arm, run by frank plan --run-pilot: the start time and "
        "block spread that design is planned from (its verdict is only an A/A check)",
        "blocks": blocks,
        "workload": design.workload,
        "workload_hash": design.workload_hash,
        "primary_metric": design.primary_metric,
        "direction": design.direction,
        "stopping": "none",
        "cache": design.cache,
        "replay": design.replay.model_dump(mode="json", exclude_none=True),
        "rule": {"kind": "sign", "alpha": PILOT_ALPHA},
        "arms": {"served": served, "candidate": served},
    }
    return {k: v for k, v in doc.items() if v is not None}


def _key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else _string(k)


def _string(s: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, and DEL must be escaped too."""
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")


def toml_value(v: object) -> str:
    """One TOML value (tables inline) of the JSON-shaped values a design document holds."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_key(k)} = {toml_value(x)}" for k, x in v.items() if x is not None) + " }"
    raise TypeError(f"no TOML value for {type(v).__name__}")


def toml_text(doc: dict[str, Any]) -> str:
    """The document as TOML: scalars first, then one ``[table]`` per top-level table."""
    lines = [f"{_key(k)} = {toml_value(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    for name, table in ((k, v) for k, v in doc.items() if isinstance(v, dict)):
        lines += ["", f"[{_key(name)}]", *(f"{_key(k)} = {toml_value(v)}" for k, v in table.items())]
    return "\n".join(lines) + "\n"


def check_base_arm(campaign: Campaign, design: DesignFile, path: Path) -> None:
    """A pilot runs the design's served arm: a speed-like kind, and a recipe that resolves (or a command)."""
    if not isinstance(kind_of(design.kind), SpeedKind):
        raise DesignError(
            f"--run-pilot runs an A/A pilot of a speed design's served arm; a {design.kind} design is planned "
            "from a pilot you run yourself (--pilot DESIGN_ID)",
            path=path,
            field="kind",
        )
    resolve_arm(campaign, design, "served", path)  # an unknown recipe or part names arms.served


def same_pilot(reg: Registered, frozen: FrozenDesign) -> bool:
    """An A/A design that measured what this pilot would: the same frozen recipes and pinned files, workload,
    replay settings, metric and cache policy, and at least the blocks asked for (a 3-block pilot is not reused
    where 8 are asked, the spread's bound being what more blocks buy)."""
    a, b = reg.frozen, frozen
    return (
        reg.design.kind == "aa"
        and reg.design.blocks >= b.design.blocks
        and (a.recipes, a.files, a.workload_hash) == (b.recipes, b.files, b.workload_hash)
        and (a.design.arms, a.design.replay, a.design.cache) == (b.design.arms, b.design.replay, b.design.cache)
        and (a.design.primary_metric, a.direction) == (b.design.primary_metric, b.direction)
    )


def all_ran(campaign: Campaign, design_id: str) -> bool:
    return all(s.ok for s in campaign.store.starts_of(design_id))


def find_pilot(campaign: Campaign, frozen: FrozenDesign) -> Registered | None:
    """The newest registered A/A design that is the same pilot, none of its starts failed (finished ones first)."""
    found = [get(campaign, r.design_id) for r in reversed(campaign.store.registry_rows()) if r.kind == "aa"]
    same = [reg for reg in found if same_pilot(reg, frozen) and all_ran(campaign, reg.design_id)]
    finished = [reg for reg in same if not unfinished(campaign, reg, True)[0]]
    return next(iter(finished or same), None)


def prepare_pilot(campaign: Campaign, design_path: Path, *, blocks: int = DEFAULT_BLOCKS, fresh: bool = False) -> Pilot:
    """The pilot of ``design_path``: found (finished: reused; unfinished: resumed) or written and registered."""
    design = load_design(design_path)
    check_base_arm(campaign, design, design_path)
    doc = pilot_document(design, design_path, blocks)
    frozen = check_design(campaign, DesignFile.model_validate(doc), design_path)  # refusals name the design file
    earlier = None if fresh else find_pilot(campaign, frozen)
    if earlier is not None:
        todo = unfinished(campaign, earlier, True)[0]
        return Pilot(earlier, todo, "resumed" if todo else "reused", design_path)
    source = inside(campaign, campaign.root / "designs" / "pilots" / f"{doc['name']}.toml")
    source.parent.mkdir(exist_ok=True)
    source.write_text(toml_text(doc))
    reg = register(campaign, source)
    return Pilot(reg, reg.slots(), "run now", design_path)


def run_pilot(
    campaign: Campaign,
    pilot: Pilot,
    *,
    echo: Callable[[str], None] = print,
    progress_factory: ProgressFactory | None = None,
) -> PilotRun:
    """Run the pilot's unfinished starts with the runner ``frank run`` uses (nothing to run when reused)."""
    reg = pilot.reg
    if pilot.how == "run now":
        echo(f"pilot: registered {reg.design_id} (hash {reg.design_hash[:16]}, seed {reg.seed})")
    t0 = time.monotonic()
    if pilot.todo:
        echo(run_design(campaign, reg.design_id, resume=True, echo=echo, progress_factory=progress_factory))
    starts = campaign.store.starts_of(reg.design_id)
    if not any(s.ok for s in starts):
        raise DesignError(
            f"the served arm did not run: all {len(starts)} starts of pilot {reg.design_id} failed "
            f"(the first: {first_line(starts[0].reason if starts else None)})",
            path=pilot.source,
            field="arms.served",
        )
    return PilotRun(reg.design_id, reg.design.blocks, pilot.how, time.monotonic() - t0, reg.registered_at)


def pilot_line(run: PilotRun) -> str:
    """``pilot aa-pilot-1, run now, 3 blocks, took 41 s``; a reused pilot says when it was registered."""
    if run.how == "reused":
        return (
            f"pilot {run.design_id}, reused (a finished pilot of the same recipe and workload, registered "
            f"{run.registered_at}), {run.blocks} blocks; --fresh-pilot runs a new one"
        )
    return f"pilot {run.design_id}, {run.how}, {run.blocks} blocks, took {duration(run.seconds)}"
