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
import os
import random
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from frankenstein import __version__
from frankenstein.campaign import Campaign
from frankenstein.config import ResolvedRecipe
from frankenstein.design.kinds import kind_of
from frankenstein.design.kinds.speed import SpeedKind, check_warmup
from frankenstein.engines import ADAPTERS, traits_of
from frankenstein.design.pins import pins_of_arm
from frankenstein.design.serving import frozen_served, toml_differences
from frankenstein.design.model import (
    DesignFile,
    FrozenDesign,
    Registered,
    check_command_arms,
    load_design,
    resolve_arms,
)
from frankenstein.errors import ConfigError, DesignError, FrankError, RegistryError, UnknownNameError, two_digests
from frankenstein.measure.metrics import BUILTIN
from frankenstein.measure.usermetrics import Declared
from frankenstein.measure.usermetrics import known as metric_table
from frankenstein.served import served_parts
from frankenstein.shipped import expand
from frankenstein.store import RegistryRow, now_iso
from frankenstein.validation import read_toml
from frankenstein.workload.replay import fresh_start_problem
from frankenstein.workload.trace import load_trace

GENESIS = "0" * 64


def canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def resolve_arm(campaign: Campaign, design: DesignFile, arm: str, path: Path | None = None) -> ResolvedRecipe | None:
    """The arm's recipe; an unknown recipe or part names the design file and the arm's field
    (``arms.candidate.parts[0]``, ``arms.served.recipe``)."""
    spec = design.arms[arm]
    if spec.command is not None:
        return None
    ledger = served_parts(campaign) if spec.recipe == "served" else []
    if spec.recipe == "served":
        _check_served_is_frozen(campaign, arm, path)
    try:
        if spec.recipe == "served":
            r = campaign.recipe(campaign.config.served, [*ledger, *spec.parts])
            return r.model_copy(update={"name": "served" + "".join(f"+{p}" for p in spec.parts)})
        return campaign.recipe(spec.recipe or "", spec.parts)
    except UnknownNameError as exc:
        if exc.what == "recipe" and spec.recipe != "served":
            field = f"arms.{arm}.recipe"
        elif exc.what == "part" and exc.index is not None and exc.index >= len(ledger):
            field = f"arms.{arm}.parts[{exc.index - len(ledger)}]"
        else:  # the served recipe or a part the ledger serves is gone from frank.toml
            raise DesignError(f"{exc} (the served recipe of arm {arm})", path=path, field=f"arms.{arm}") from exc
        raise DesignError(exc.message, path=path, field=field) from exc


def _check_served_is_frozen(campaign: Campaign, arm: str, path: Path | None) -> None:
    """An arm written ``recipe = "served"`` must be what is served: frank.toml must still resolve the served
    recipe as the last adopt froze it (else the design would test against a recipe nobody serves)."""
    served = frozen_served(campaign)
    diffs = toml_differences(campaign, served) if served.frozen else []
    if diffs:
        raise DesignError(
            f"the served recipe ({served.why}) is not what frank.toml resolves now: {'; '.join(diffs)}; a served arm "
            "must be what frank serve launches (put frank.toml back, or test the change as a part of its own)",
            path=path,
            field=f"arms.{arm}.recipe",
        )


def _same(a: ResolvedRecipe | None, b: ResolvedRecipe | None, design: DesignFile, arm: str = "candidate") -> bool:
    if a is None or b is None:
        return design.arms["served"].command == design.arms[arm].command
    return not a.launch_differences(b)


def _no_op_parts(recipes: dict[str, ResolvedRecipe | None]) -> str:
    """Words naming the parts that made no difference to what is launched (``frank engine command`` shows it)."""
    served, cand = recipes.get("served"), recipes.get("candidate")
    if served is None or cand is None:
        return ""
    extra = [p for p in cand.parts if p not in served.parts] or [p for p in served.parts if p not in cand.parts]
    if not extra:
        return ""
    return f": part(s) {', '.join(extra)} resolve to the command line the other arm launches already"


def _check_family(design: DesignFile, recipes: dict[str, ResolvedRecipe | None], path: Path) -> None:
    """A family screens candidates against served: none may be the served arm again."""
    for arm in design.candidates:
        if _same(recipes["served"], recipes[arm], design, arm):
            raise DesignError(f"candidate {arm} is identical to the served arm", path=path, field=f"arms.{arm}")


def check_design(campaign: Campaign, design: DesignFile, path: Path) -> FrozenDesign:
    """Everything registration refuses, each with the file and field named."""
    kind = kind_of(design.kind)
    declared = design_metrics(campaign, design, path)
    table = metric_table(declared)
    kind.check(design, path)
    direction: Literal["lower", "higher"] = design.direction or table[design.primary_metric].direction
    recipes = resolve_arms(lambda arm: resolve_arm(campaign, design, arm, path), path, design.arm_names)
    check_command_arms(design, path)
    for arm, recipe in recipes.items():
        if recipe is not None and recipe.engine not in ADAPTERS:
            known = ", ".join(ADAPTERS)
            raise DesignError(
                f"recipe {recipe.name!r}: unknown engine {recipe.engine!r} (known: {known})",
                path=path,
                field=f"arms.{arm}",
            )
    for arm, recipe in recipes.items():
        if recipe is not None and not traits_of(recipe.engine).launched and recipe.parts:
            raise DesignError(
                f"recipe {recipe.name!r} is a server frank does not start (engine {recipe.engine}), so parts "
                f"{', '.join(recipe.parts)} cannot be applied to it; start a server with them yourself and name it "
                "in a recipe of its own",
                path=path,
                field=f"arms.{arm}.parts",
            )
    outside = [r.engine for r in recipes.values() if r is not None and not traits_of(r.engine).launched]
    if design.cache == "cold" and outside:
        raise DesignError(
            'cache = "cold" empties each start\'s cache folders, and a server frank did not start '
            f"(engine {outside[0]}) is given none",
            path=path,
            field="cache",
        )
    if fresh := fresh_start_problem(design.replay, {a: r.engine for a, r in recipes.items() if r is not None}):
        raise DesignError(f"arm {fresh[0]}: {fresh[1]}", path=path, field="replay.fresh_starts")
    kind.check_recipes(design, recipes, path, table)
    if design.family:
        _check_family(design, recipes, path)
        same = False
    else:
        same = _same(recipes["served"], recipes["candidate"], design)
    if same and not kind.same_arms:
        raise DesignError(
            f'the two arms are identical{_no_op_parts(recipes)}; only an A/A design (kind = "aa", or "fidelity_aa" '
            "for the engine's own fidelity noise floor) may compare a recipe with itself",
            path=path,
            field="arms",
        )
    if kind.same_arms and not same:
        raise DesignError("an A/A design needs the same recipe in both arms", path=path, field="arms")
    wl_path, wl_hash = _check_workload(campaign, design, path)
    files = {arm: [p.as_dict() for p in pins_of_arm(arm, recipes[arm], design.arms[arm].command)] for arm in recipes}
    return FrozenDesign(
        design=design.model_copy(update={"order": design.order or "balanced"}),  # the draw is registered
        recipes=recipes,
        workload_path=wl_path,
        workload_hash=wl_hash,
        direction=direction,
        files=files,
        metrics=declared,
    )


def design_metrics(campaign: Campaign, design: DesignFile, path: Path) -> dict[str, Declared]:
    """The user metrics (frank.toml ``[metrics.NAME]``) the design names; a metric neither built in nor
    declared there is refused naming the design file and the field."""
    declared = campaign.config.metrics
    for field, name in [
        ("primary_metric", design.primary_metric),
        *((f"secondary[{i}]", s) for i, s in enumerate(design.secondary)),
    ]:
        if name not in BUILTIN and name not in declared:
            names = ", ".join(sorted({*BUILTIN, *declared}))
            raise DesignError(f"unknown metric {name!r} (known: {names})", path=path, field=field)
    return {n: declared[n] for n in (design.primary_metric, *design.secondary) if n in declared}


def _check_workload(campaign: Campaign, design: DesignFile, path: Path) -> tuple[str | None, str | None]:
    kind = kind_of(design.kind)
    if not kind.uses_workload:
        return None, None
    if design.workload is None:
        if all(a.command is not None for a in design.arms.values()):
            return None, None
        raise DesignError("a workload is required", path=path, field="workload")
    wl = Path(expand(design.workload))
    if not wl.is_absolute():
        wl = (campaign.root / wl).resolve()
    loaded = load_trace(wl)
    h = loaded.hash
    kind.check_workload(list(loaded.turns), wl, path)
    if isinstance(kind, SpeedKind):  # speed, aa, screen replay the workload with warm-up turns
        check_warmup(design, list(loaded.turns), path)
    if design.workload_hash is not None and design.workload_hash != h:
        pins, has = two_digests(design.workload_hash, h)
        what = (
            "is not the workload's full sha256" if h.startswith(design.workload_hash) else "no longer matches its hash"
        )
        raise DesignError(
            f"workload {wl} {what} (design pins {pins}, file has {has})", path=path, field="workload_hash"
        )
    return str(wl), h


def make_schedule(seed: str, design: DesignFile) -> list[list[str]]:
    """Per block, the arm order of its starts (each arm ``starts_per_arm`` times), shuffled by the seed.

    ``order = "balanced"``: blocks come in pairs, the second running the first's order with the arms
    swapped (served where candidate ran and back), so each arm holds every position equally often over a
    pair, also with several starts per arm (an odd last block is shuffled on its own). Otherwise
    (``independent``, and every design registered before ``order`` existed) each block is shuffled on its
    own: the draw those designs registered, unchanged."""
    rng = random.Random(int(seed, 16))
    arms = design.arm_names  # ARMS for two arms: the draw older designs registered
    out: list[list[str]] = []
    for b in range(design.blocks):
        if design.order == "balanced" and b % 2 == 1:
            swap = {arm: arms[(i + 1) % len(arms)] for i, arm in enumerate(arms)}
            out.append([swap[arm] for arm in out[-1]])
            continue
        order = [arm for arm in arms for _ in range(design.starts_per_arm)]
        rng.shuffle(order)
        out.append(order)
    return out


def next_design_id(name: str, rows: Sequence[RegistryRow]) -> str:
    """``NAME-N``, N counting designs of that name (``kvq8-fid-1`` for the first). Ids already stored never
    change: campaigns registered before ids were per name hold ``NAME-SEQ`` ids, so N skips any id taken."""
    taken = {r.design_id for r in rows}
    n = sum(1 for r in rows if r.name == name) + 1
    while f"{name}-{n}" in taken:
        n += 1
    return f"{name}-{n}"


def _row_hash(
    prev: str, design_id: str, design_hash: str, seed: str, schedule: str, at: str, version: str, source: str
) -> str:
    return sha256("\n".join([prev, design_id, design_hash, seed, schedule, at, version, source]))


def register(campaign: Campaign, design_path: str | Path) -> Registered:
    """Validate, freeze, hash and append a design; copy the file into ``designs/``.

    A refused design is kept as a refusal in the store (for the note's "what didn't work") and re-raised."""
    path = Path(design_path)
    try:
        design = load_design(path)
        frozen = check_design(campaign, design, path)
    except ConfigError as exc:  # the design, its workload or its recipes: every refusal is stored
        campaign.store.insert_refusal(what="registration", name=_design_name(path), reason=str(exc), path=str(path))
        raise
    source = path.read_bytes()
    text = canonical({"frozen": frozen.model_dump(mode="json"), "source_sha256": sha256(source)})
    design_hash = sha256(text)
    seed = secrets.token_hex(8)
    schedule = make_schedule(seed, frozen.design)
    sched = canonical(schedule)
    at = now_iso()

    def build(last: RegistryRow | None) -> RegistryRow:
        seq = (last.seq if last else 0) + 1
        prev = last.row_hash if last else GENESIS
        design_id = next_design_id(design.name, campaign.store.registry_rows())
        row_hash = _row_hash(prev, design_id, design_hash, seed, sched, at, __version__, text)
        inside(campaign, campaign.root / "designs" / f"{design_id}.toml").write_bytes(source)
        return RegistryRow(
            seq=seq,
            design_id=design_id,
            kind=design.kind,
            name=design.name,
            canonical=text,
            design_hash=design_hash,
            seed=seed,
            schedule=sched,
            registered_at=at,
            tool_version=__version__,
            prev_hash=prev,
            row_hash=row_hash,
        )

    row = campaign.store.append_registry(build)
    return Registered(row.seq, row.design_id, frozen, design_hash, seed, schedule, at, sha256(source))


def inside(campaign: Campaign, path: Path) -> Path:
    """A path frank is about to write, resolved and checked to stay inside the campaign folder (names are
    slugs already; this also holds against a symlinked subfolder)."""
    resolved, root = path.resolve(), campaign.root.resolve()
    if not resolved.is_relative_to(root):
        raise DesignError(f"refusing to write {resolved}: it is outside the campaign folder {root}")
    return resolved


def _design_name(path: Path) -> str:
    """The design's ``name`` if the file still parses that far, else the file's stem."""
    try:
        name = read_toml(path).get("name")
    except ConfigError:
        name = None
    return name if isinstance(name, str) and name else path.stem


def _from_row(row: RegistryRow) -> Registered:
    body = json.loads(row.canonical)
    return Registered(
        seq=row.seq,
        design_id=row.design_id,
        frozen=FrozenDesign.model_validate(body["frozen"]),
        design_hash=row.design_hash,
        seed=row.seed,
        schedule=json.loads(row.schedule),
        registered_at=row.registered_at,
        source_sha256=body["source_sha256"],
    )


def verify(campaign: Campaign) -> list[str]:
    """Check the registry chain, every design against its hash, every registered file copy, the evidence
    chain over every record (``Store.verify``: starts, turns, ledger steps, refusals, the head file, registered
    slots) and every workload a design pinned. Returns one line per design checked; raises
    :class:`RegistryError` at the first problem, naming the record.
    A campaign remembers that it was verified, so :func:`get` verifies once per command."""
    prev = GENESIS
    lines = []
    for row in campaign.store.registry_rows():
        did = row.design_id
        if row.prev_hash != prev:
            raise RegistryError(
                f"registry row {row.seq} ({did}): the chain is broken (a row before it was changed or removed)"
            )
        if sha256(row.canonical) != row.design_hash:
            raise RegistryError(f"registry row {row.seq} ({did}): the stored design does not match its hash")
        expect = _row_hash(
            prev, did, row.design_hash, row.seed, row.schedule, row.registered_at, row.tool_version, row.canonical
        )
        if expect != row.row_hash:
            raise RegistryError(f"registry row {row.seq} ({did}): the row was changed after registration")
        reg = _from_row(row)
        copy = campaign.root / "designs" / f"{did}.toml"
        if not copy.exists() or sha256(copy.read_bytes()) != reg.source_sha256:
            raise RegistryError(f"{copy}: the registered design file was changed or removed after registration")
        prev = row.row_hash
        lines.append(f"ok  {did}  {row.design_hash[:16]}  {row.registered_at}")
    campaign.store.verify()
    for text, source in kept_heads(os.environ, campaign.store.head_mirror):
        if text.strip() or campaign.store.chain_head() is not None:  # an empty mirror of an empty chain is fine
            campaign.store.verify_kept(text, source)
    for row in campaign.store.registry_rows():
        _check_pinned_workload(_from_row(row))
    campaign.verified_through = prev
    return lines


EXPECT_HEAD = "FRANK_EXPECT_HEAD"


def kept_heads(env: Mapping[str, str], mirror: Path | None = None) -> list[tuple[str, str]]:
    """(text, source) of every head kept outside the campaign that verification checks besides frank.head:
    ``[integrity] head_mirror`` (appended on every commit; its last line) and ``FRANK_EXPECT_HEAD`` (a head as
    ``frank verify`` prints it, ``SEQ HASH``, the bare hash, or a file holding one, such as a copy of frank.head
    kept elsewhere). So every command that verifies (analyze, adopt, revert, run, serve, report, verify) also
    refuses a chain that no longer holds the kept head."""
    out = []
    if mirror is not None:
        try:
            out.append((mirror.read_text(errors="replace"), f"[integrity] head_mirror {mirror}"))
        except OSError as exc:
            raise RegistryError(f"[integrity] head_mirror {mirror}: {exc.strerror}") from exc
    value = env.get(EXPECT_HEAD, "").strip()
    if not value:
        return out
    path = Path(value)
    if path.is_file():
        try:
            return [*out, (path.read_text(errors="replace"), f"{EXPECT_HEAD}={value}")]
        except OSError as exc:
            raise RegistryError(f"{EXPECT_HEAD}={value}: {exc.strerror}") from exc
    return [*out, (value, EXPECT_HEAD)]


def _check_pinned_workload(reg: Registered) -> None:
    """The workload file a design pinned at registration must still hash to the pinned value."""
    path, pinned = reg.frozen.workload_path, reg.frozen.workload_hash
    if not path or not pinned:
        return
    try:
        h = load_trace(path).hash
    except FrankError as exc:
        raise RegistryError(f"design {reg.design_id}: its workload {path} no longer reads ({exc})") from exc
    if h != pinned:
        raise RegistryError(
            f"design {reg.design_id}: workload {path} changed since registration (pinned {{}}, file has {{}})".format(
                *two_digests(pinned, h)
            )
        )


def verified(campaign: Campaign, command: str, *, force: bool = False, why: str | None = None) -> None:
    """Verify before ``command`` works from the campaign. A failure refuses, naming the first broken record,
    unless ``force`` with a reason: the override (command, reason, what failed) is then itself recorded in the
    chain, and the command goes on."""
    if force and not (why or "").strip():
        raise RegistryError(f"--force needs --why TEXT: a forced {command} is recorded with its reason")
    try:
        verify(campaign)
    except RegistryError as exc:
        if not force:
            raise RegistryError(
                f"{exc}; {command} refuses to work from a campaign that fails verification "
                "(`frank verify` shows it; --force --why TEXT overrides, and is recorded)"
            ) from exc
        campaign.store.insert_override(command=command, why=str(why), problem=str(exc))
        campaign.verified_through = campaign.store.registry_head() or GENESIS


def get(campaign: Campaign, design_id: str) -> Registered:
    """A registered design. The registry is verified first, once per command (per open campaign): rows
    appended since are checked on the next call, and a tampered registry is refused."""
    if campaign.verified_through != (campaign.store.registry_head() or GENESIS):
        verify(campaign)
    row = campaign.store.registry_row(design_id)
    if row is None:
        known = [r.design_id for r in campaign.store.registry_rows()]
        raise DesignError(f"no registered design {design_id!r} (registered: {', '.join(known) or 'none'})")
    return _from_row(row)
