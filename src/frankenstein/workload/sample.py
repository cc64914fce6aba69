"""``frank workload slice`` and ``frank workload sample``: a smaller workload cut from a recorded one (pure
selection, then one write).

A slice keeps the turns that pass every filter given (sessions, turn indices, prompt tokens, endpoint).
A sample draws whole sessions (or single turns, ``by="turn"``) at random, stratified by endpoint or by
prompt-length tercile, with proportional allocation (largest remainder) and ``random.Random(seed)``:
the same parent, options and seed give the same turns, hence the same workload hash. Turns keep the
parent's file order, so a session's turns stay in order. Each turn already holds its recorded history,
so a sampled turn replays byte-identically without the turns before it.

Provenance: the child is written with a sidecar ``OUT.provenance.json`` naming the parent (path and
hash), the method, its options and the seed; ``frank workload stats`` prints it. The child's hash is
an ordinary workload hash that a design pins like any other.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from frankenstein.errors import FrankError, TraceError
from frankenstein.workload.stats import CHARS_PER_TOKEN, prompt_text
from frankenstein.workload.trace import Turn, Workload, workload_from_turns, write_trace

PROVENANCE_SUFFIX = ".provenance.json"
Unit = Literal["session", "turn"]
Strata = Literal["none", "endpoint", "length"]
ENDPOINT_NAMES = {"chat": "/v1/chat/completions", "completions": "/v1/completions", "completion": "/completion"}


@dataclass(frozen=True)
class SliceFilter:
    """Every filter a slice applies; ``None`` means not filtered."""

    sessions: frozenset[str] | None = None
    turn_min: int | None = None
    turn_max: int | None = None
    tokens_min: int | None = None
    tokens_max: int | None = None
    endpoint: str | None = None

    def keeps(self, turn: Turn) -> bool:
        """True when ``turn`` passes every filter."""
        tokens = prompt_tokens(turn)
        return (
            (self.sessions is None or turn.session_id in self.sessions)
            and (self.turn_min is None or turn.turn_index >= self.turn_min)
            and (self.turn_max is None or turn.turn_index <= self.turn_max)
            and (self.tokens_min is None or tokens >= self.tokens_min)
            and (self.tokens_max is None or tokens <= self.tokens_max)
            and (self.endpoint is None or turn.endpoint == self.endpoint)
        )


@dataclass(frozen=True)
class Cut:
    """A cut workload: its turns (parent order), what made it, and how many were drawn per stratum."""

    turns: tuple[Turn, ...]
    method: dict[str, Any]
    strata: dict[str, tuple[int, int]] = field(default_factory=dict)  # stratum -> (drawn, of)


def prompt_tokens(turn: Turn) -> int:
    """The recorded prompt token count, or characters / 4 when none was recorded (as ``workload stats``)."""
    if turn.output.prompt_tokens is not None:
        return turn.output.prompt_tokens
    return max(1, round(len(prompt_text(turn)) / CHARS_PER_TOKEN))


def endpoint_of(name: str) -> str:
    """``chat``/``completions``/``completion`` or a full endpoint path; anything else is a usage error."""
    if name in ENDPOINT_NAMES.values():
        return name
    if name not in ENDPOINT_NAMES:
        raise FrankError(f"--endpoint {name!r}: expected one of {', '.join(ENDPOINT_NAMES)}")
    return ENDPOINT_NAMES[name]


def slice_turns(workload: Workload, flt: SliceFilter) -> Cut:
    """The turns of ``workload`` that pass ``flt``, in file order."""
    kept = tuple(t for t in workload.turns if flt.keeps(t))
    method = {"method": "slice", **{k: _jsonable(v) for k, v in vars(flt).items() if v is not None}}
    return Cut(kept, method)


def _jsonable(value: object) -> object:
    return sorted(value) if isinstance(value, frozenset) else value


# ---------------------------------------------------------------- the stratified sample


def _units(workload: Workload, by: Unit) -> list[tuple[Turn, ...]]:
    """Sampling units in file order of first appearance: whole sessions or single turns."""
    if by == "turn":
        return [(t,) for t in workload.turns]
    groups: dict[str, list[Turn]] = {}
    for t in workload.turns:
        groups.setdefault(t.session_id, []).append(t)
    return [tuple(g) for g in groups.values()]


def _length_key(units: Sequence[tuple[Turn, ...]]) -> Callable[[tuple[Turn, ...]], str]:
    """Tercile of a unit's prompt tokens (its mean over its turns), cut at the units' own 1/3 and 2/3 ranks."""
    sizes = sorted(_mean_tokens(u) for u in units)
    low, high = sizes[len(sizes) // 3], sizes[(2 * len(sizes)) // 3]

    def key(unit: tuple[Turn, ...]) -> str:
        size = _mean_tokens(unit)
        return "short" if size < low else ("long" if size >= high else "medium")

    return key


def _mean_tokens(unit: tuple[Turn, ...]) -> float:
    return sum(prompt_tokens(t) for t in unit) / len(unit)


def _stratum_key(units: Sequence[tuple[Turn, ...]], strata: Strata) -> Callable[[tuple[Turn, ...]], str]:
    if strata == "length":
        return _length_key(units)
    if strata == "endpoint":
        return lambda unit: unit[0].endpoint
    return lambda unit: "all"


def allocate(sizes: dict[str, int], n: int) -> dict[str, int]:
    """Proportional allocation of ``n`` draws over strata of the given sizes, by largest remainder
    (ties to the stratum named first in sorted order), never more than a stratum holds."""
    total = sum(sizes.values())
    exact = {k: n * s / total for k, s in sizes.items()}
    counts = {k: min(sizes[k], int(v)) for k, v in exact.items()}
    by_remainder = sorted(sizes, key=lambda k: (-(exact[k] - int(exact[k])), k))
    while sum(counts.values()) < n:
        grown = False
        for k in by_remainder:
            if sum(counts.values()) < n and counts[k] < sizes[k]:
                counts[k] += 1
                grown = True
        if not grown:
            break
    return counts


def sample_turns(workload: Workload, n: int, seed: int, by: Unit = "session", strata: Strata = "none") -> Cut:
    """``n`` units drawn without replacement, stratified, from ``random.Random(seed)``; turns in file order."""
    units = _units(workload, by)
    if not 0 < n <= len(units):
        raise FrankError(f"--n {n}: the workload has {len(units)} {by}s; give 1 to {len(units)}")
    key = _stratum_key(units, strata)
    groups: dict[str, list[int]] = {}
    for i, unit in enumerate(units):
        groups.setdefault(key(unit), []).append(i)
    counts = allocate({k: len(v) for k, v in groups.items()}, n)
    rng = random.Random(seed)
    chosen: set[int] = set()
    for k in sorted(groups):
        chosen.update(rng.sample(groups[k], counts[k]))
    turns = tuple(t for i in sorted(chosen) for t in units[i])
    method = {"method": "sample", "n": n, "by": by, "strata": strata, "seed": seed}
    return Cut(turns, method, {k: (counts[k], len(groups[k])) for k in sorted(groups)})


# ---------------------------------------------------------------- writing the child with its provenance


def provenance_path(trace: Path) -> Path:
    return trace.with_name(trace.name + PROVENANCE_SUFFIX)


def write_cut(parent: Workload, cut: Cut, out: Path) -> Workload:
    """Write the cut's turns to ``out`` and its provenance beside it; returns the child workload."""
    if not cut.turns:
        raise FrankError(f"{parent.path}: no turn passes the filters given; nothing written to {out}")
    if not out.parent.is_dir():
        raise FrankError(f"{out}: the folder {out.parent} does not exist")
    digest = write_trace(out, cut.turns)
    record = {
        "parent": str(parent.path),
        "parent_hash": parent.hash,
        **cut.method,
        "turns": len(cut.turns),
        "hash": digest,
    }
    tmp = provenance_path(out).with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, provenance_path(out))
    return workload_from_turns(cut.turns, out)


def read_provenance(trace: Path) -> dict[str, Any] | None:
    """The sidecar of a cut workload, or ``None`` when the trace has none (a recorded or imported one)."""
    path = provenance_path(trace)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TraceError(f"unreadable provenance ({exc})", path=path) from exc
    if not isinstance(data, dict):
        raise TraceError("expected a JSON object", path=path)
    return data


def provenance_lines(trace: Path, current_hash: str) -> list[str]:
    """What ``workload stats`` prints about where a cut workload came from (nothing for other traces)."""
    data = read_provenance(trace)
    if data is None:
        return []
    what = ", ".join(f"{k} {data[k]}" for k in ("n", "by", "strata", "seed") if k in data)
    lines = [f"cut from       {data.get('parent')} (hash {str(data.get('parent_hash'))[:16]}…) by {data.get('method')}"]
    if what:
        lines.append(f"               {what}")
    if data.get("hash") != current_hash:
        lines.append("               the file changed since it was cut: its hash differs from the provenance's")
    return lines
