"""Registration: canonicalise, hash, and append to a hash-chained registry in the store.

Each row's ``row_hash`` covers the previous row's hash, so editing any row (or deleting one) breaks
the chain from there on; each row's ``design_hash`` covers the canonical frozen design, and the
registered copy of the design file in ``designs/`` is pinned by its sha256. The randomisation seed
is drawn from OS entropy at registration, and the arm order of every block is derived from it and
stored before anything runs.
"""

from __future__ import annotations

import hashlib
import json
import random
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from frankenstein import __version__
from frankenstein.campaign import Campaign
from frankenstein.config import ResolvedRecipe
from frankenstein.design.model import ARMS, DesignFile, FidelityRule, FrozenDesign, load_design
from frankenstein.errors import DesignError, RegistryError
from frankenstein.measure.timings import METRICS
from frankenstein.store import now_iso
from frankenstein.workload.trace import load_trace

GENESIS = "0" * 64


def canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


@dataclass(frozen=True)
class Registered:
    seq: int
    design_id: str
    frozen: FrozenDesign
    design_hash: str
    seed: str
    schedule: list[list[str]]
    registered_at: str
    source_sha256: str

    @property
    def design(self) -> DesignFile:
        return self.frozen.design


def _served_recipe_name(campaign: Campaign) -> str:
    return campaign.config.served


def _served_parts(campaign: Campaign) -> list[str]:
    try:
        from frankenstein.ledger import served_parts  # type: ignore[attr-defined]
    except ImportError:
        return []
    return list(served_parts(campaign))


def resolve_arm(campaign: Campaign, design: DesignFile, arm: str) -> ResolvedRecipe | None:
    spec = design.arms[arm]
    if spec.command is not None:
        return None
    if spec.recipe == "served":
        r = campaign.recipe(_served_recipe_name(campaign), [*_served_parts(campaign), *spec.parts])
        return r.model_copy(update={"name": "served" + "".join(f"+{p}" for p in spec.parts)})
    return campaign.recipe(spec.recipe or "", spec.parts)


def _same(a: ResolvedRecipe | None, b: ResolvedRecipe | None, design: DesignFile) -> bool:
    if a is None or b is None:
        return design.arms["served"].command == design.arms["candidate"].command
    keys = ("engine", "model", "args", "env", "binary", "python", "command")
    return all(getattr(a, k) == getattr(b, k) for k in keys)


def check_design(campaign: Campaign, design: DesignFile, path: Path) -> FrozenDesign:
    """Everything registration refuses, each with the file and field named."""
    metrics = dict(METRICS)
    for field, name in [("primary_metric", design.primary_metric), *(("secondary", s) for s in design.secondary)]:
        if design.kind in ("speed", "aa", "screen") and name not in metrics:
            raise DesignError(f"unknown metric {name!r} (known: {', '.join(sorted(metrics))})", path=path, field=field)
    if design.kind == "agent" and design.primary_metric != "passes":
        raise DesignError("an agent design's primary metric is 'passes'", path=path, field="primary_metric")
    direction = design.direction or metrics.get(design.primary_metric, "lower")
    _check_rule(design, path)
    recipes = {arm: resolve_arm(campaign, design, arm) for arm in ARMS}
    if design.kind != "aa" and _same(recipes["served"], recipes["candidate"], design):
        raise DesignError("the two arms are identical; only an A/A design (kind = \"aa\") may compare a recipe with itself",
                          path=path, field="arms")
    if design.kind == "aa" and not _same(recipes["served"], recipes["candidate"], design):
        raise DesignError("an A/A design needs the same recipe in both arms", path=path, field="arms")
    wl_path, wl_hash = _check_workload(campaign, design, path)
    return FrozenDesign(design=design, recipes=recipes, workload_path=wl_path, workload_hash=wl_hash, direction=direction)


def _check_rule(design: DesignFile, path: Path) -> None:
    from frankenstein.design.rules import unreachable_reason

    rule = design.rule
    if design.kind == "fidelity":
        if rule.kind != "fidelity":
            raise DesignError("a fidelity design needs rule.kind = \"fidelity\" with a tolerance", path=path, field="rule.kind")
        return
    if isinstance(rule, FidelityRule):
        raise DesignError("rule \"fidelity\" is only for fidelity designs", path=path, field="rule.kind")
    if design.kind == "agent" and rule.kind != "harm":
        raise DesignError("an agent design uses rule \"harm\"", path=path, field="rule.kind")
    reason = unreachable_reason(rule, design.blocks)
    if reason:
        raise DesignError(reason, path=path, field="blocks")


def _check_workload(campaign: Campaign, design: DesignFile, path: Path) -> tuple[str | None, str | None]:
    if design.kind == "agent":
        return None, None
    if design.workload is None:
        if all(a.command is not None for a in design.arms.values()):
            return None, None
        raise DesignError("a workload is required", path=path, field="workload")
    from frankenstein.shipped import expand

    wl = Path(expand(design.workload))
    if not wl.is_absolute():
        wl = (campaign.root / wl).resolve()
    loaded = load_trace(wl)
    h = loaded.hash
    if design.kind == "fidelity":
        from frankenstein.fidelity.forced import workload_problems

        problems = workload_problems(loaded.turns)
        if len(problems) == len(loaded.turns):
            raise DesignError(f"workload {wl} has no turn whose continuation can be forced ({problems[0]}); "
                              "make one with `frank fidelity fill`", path=path, field="workload")
    if design.workload_hash is not None and design.workload_hash != h:
        raise DesignError(
            f"workload {wl} no longer matches its hash (design pins {design.workload_hash[:12]}…, file has {h[:12]}…)",
            path=path, field="workload_hash",
        )
    return str(wl), h


def make_schedule(seed: str, design: DesignFile) -> list[list[str]]:
    """Per block, the arm order of its starts (each arm ``starts_per_arm`` times), shuffled by the seed."""
    rng = random.Random(int(seed, 16))
    out = []
    for _ in range(design.blocks):
        order = [arm for arm in ARMS for _ in range(design.starts_per_arm)]
        rng.shuffle(order)
        out.append(order)
    return out


def _row_hash(prev: str, design_id: str, design_hash: str, seed: str, schedule: str, at: str, version: str, source: str) -> str:
    return sha256("\n".join([prev, design_id, design_hash, seed, schedule, at, version, source]))


def register(campaign: Campaign, design_path: str | Path) -> Registered:
    """Validate, freeze, hash and append a design; copy the file into ``designs/``."""
    path = Path(design_path)
    design = load_design(path)
    frozen = check_design(campaign, design, path)
    source = path.read_bytes()
    body = {"frozen": frozen.model_dump(mode="json"), "source_sha256": sha256(source)}
    text = canonical(body)
    design_hash = sha256(text)
    seed = secrets.token_hex(8)
    schedule = make_schedule(seed, design)
    at = now_iso()
    with campaign.store.transaction() as c:
        last = c.execute("SELECT seq, row_hash FROM registry ORDER BY seq DESC LIMIT 1").fetchone()
        seq = (last["seq"] if last else 0) + 1
        prev = last["row_hash"] if last else GENESIS
        design_id = f"{design.name}-{seq}"
        sched = canonical(schedule)
        row_hash = _row_hash(prev, design_id, design_hash, seed, sched, at, __version__, text)
        c.execute(
            "INSERT INTO registry (seq, design_id, kind, name, canonical, design_hash, seed, schedule, registered_at,"
            " tool_version, prev_hash, row_hash) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (seq, design_id, design.kind, design.name, text, design_hash, seed, sched, at, __version__, prev, row_hash),
        )
        copy = campaign.root / "designs" / f"{design_id}.toml"
        copy.write_bytes(source)
    return Registered(seq, design_id, frozen, design_hash, seed, schedule, at, sha256(source))


def _from_row(row: Any) -> Registered:
    body = json.loads(row["canonical"])
    return Registered(
        seq=row["seq"], design_id=row["design_id"], frozen=FrozenDesign.model_validate(body["frozen"]),
        design_hash=row["design_hash"], seed=row["seed"], schedule=json.loads(row["schedule"]),
        registered_at=row["registered_at"], source_sha256=body["source_sha256"],
    )


def verify(campaign: Campaign) -> list[str]:
    """Check the whole chain, every design against its hash, and every registered file copy.
    Returns one line per design checked; raises :class:`RegistryError` at the first problem."""
    prev = GENESIS
    lines = []
    for row in campaign.store.query("SELECT * FROM registry ORDER BY seq"):
        did = row["design_id"]
        if row["prev_hash"] != prev:
            raise RegistryError(f"registry row {row['seq']} ({did}): the chain is broken (a row before it was changed or removed)")
        if sha256(row["canonical"]) != row["design_hash"]:
            raise RegistryError(f"registry row {row['seq']} ({did}): the stored design does not match its hash")
        expect = _row_hash(prev, did, row["design_hash"], row["seed"], row["schedule"], row["registered_at"],
                           row["tool_version"], row["canonical"])
        if expect != row["row_hash"]:
            raise RegistryError(f"registry row {row['seq']} ({did}): the row was changed after registration")
        reg = _from_row(row)
        copy = campaign.root / "designs" / f"{did}.toml"
        if not copy.exists() or sha256(copy.read_bytes()) != reg.source_sha256:
            raise RegistryError(f"{copy}: the registered design file was changed or removed after registration")
        prev = row["row_hash"]
        lines.append(f"ok  {did}  {row['design_hash'][:16]}  {row['registered_at']}")
    return lines


def get(campaign: Campaign, design_id: str) -> Registered:
    """A registered design, after verifying the registry (a tampered registry is refused)."""
    verify(campaign)
    rows = campaign.store.query("SELECT * FROM registry WHERE design_id = ?", (design_id,))
    if not rows:
        known = [r["design_id"] for r in campaign.store.query("SELECT design_id FROM registry ORDER BY seq")]
        raise DesignError(f"no registered design {design_id!r} (registered: {', '.join(known) or 'none'})")
    return _from_row(rows[0])
