"""Block CSV files: values measured elsewhere, read with one message per problem naming the file
and the line (and column).

Two layouts, told apart by the header (columns in any order, blank lines and '#' comments skipped):

    block,served,candidate   the start-level metric of each arm per block (tested as log ratios;
                             values must be positive)
    block,difference         paired differences, candidate - served, per block (e.g. pass counts)
    arm,value                unpaired starts (a completely randomized design): one row per start, arm
                             served or candidate; tested by the exact two-sample permutation test

    read_blocks_csv(path)                       -> BlockData
    analyze_blocks_file(path, rule, direction)  -> Verdict (refuses too few blocks for the rule)
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

from frankenstein.design.rules import (
    DataKind,
    Direction,
    Rule,
    Verdict,
    evaluate,
    evaluate_differences,
    evaluate_unpaired,
    unpaired_reason,
    unreachable_reason,
)
from frankenstein.design.model import MAX_BLOCKS
from frankenstein.errors import AnalysisError

LAYOUTS: dict[frozenset[str], DataKind] = {
    frozenset({"block", "served", "candidate"}): "ratio",
    frozenset({"block", "difference"}): "difference",
}
UNPAIRED = frozenset({"arm", "value"})
EXPECTED = "block,served,candidate or block,difference or arm,value"


@dataclass(frozen=True)
class BlockData:
    path: Path
    data: DataKind
    blocks: list[str] = field(default_factory=list)
    served: list[float] = field(default_factory=list)
    candidate: list[float] = field(default_factory=list)
    differences: list[float] = field(default_factory=list)
    unpaired: bool = False


def read_blocks_csv(path: str | Path) -> BlockData:
    """Read and check a block CSV; raises AnalysisError naming the file and line on bad input."""
    path = Path(path)
    lines = [
        (i, line)
        for i, line in enumerate(_read_text(path).splitlines(), start=1)
        if line.strip() and not line.lstrip().startswith("#")
    ]
    if not lines:
        raise AnalysisError(f"{path}: empty file; expected a header line: {EXPECTED}")
    (hline, header_text), rows = lines[0], lines[1:]
    header = [h.strip().lower() for h in _split(header_text)]
    if frozenset(header) == UNPAIRED and len(header) == 2:
        return _read_unpaired(path, header, rows)
    data = LAYOUTS.get(frozenset(header))
    if data is None or len(header) != len(set(header)):
        raise AnalysisError(f"{path}: line {hline}: unknown header {header_text.strip()!r}; expected {EXPECTED}")
    if not rows:
        raise AnalysisError(f"{path}: no blocks after the header")
    if len(rows) > MAX_BLOCKS:
        raise AnalysisError(
            f"{path}: {len(rows)} blocks; at most {MAX_BLOCKS} are analysed (a design's bound: the exact tests "
            "compute with fractions over every block, and a million blocks would run for hours)"
        )
    columns: dict[str, list[float]] = {h: [] for h in header if h != "block"}
    seen: dict[str, int] = {}
    for lineno, text in rows:
        cells = [c.strip() for c in _split(text)]
        if len(cells) != len(header):
            raise AnalysisError(
                f"{path}: line {lineno}: expected {len(header)} fields ({','.join(header)}), found {len(cells)}"
            )
        record = dict(zip(header, cells))
        _add_block(path, lineno, record["block"], seen)
        for name in columns:
            columns[name].append(_number(path, lineno, name, record[name], positive=data == "ratio"))
    return BlockData(
        path, data, list(seen), columns.get("served", []), columns.get("candidate", []), columns.get("difference", [])
    )


def _read_unpaired(path: Path, header: list[str], rows: list[tuple[int, str]]) -> BlockData:
    """``arm,value`` rows: each arm's start values in file order."""
    if not rows:
        raise AnalysisError(f"{path}: no starts after the header")
    values: dict[str, list[float]] = {"served": [], "candidate": []}
    for lineno, text in rows:
        cells = [c.strip() for c in _split(text)]
        if len(cells) != 2:
            raise AnalysisError(f"{path}: line {lineno}: expected 2 fields ({','.join(header)}), found {len(cells)}")
        record = dict(zip(header, cells))
        if record["arm"] not in values:
            raise AnalysisError(
                f"{path}: line {lineno}, column arm: must be served or candidate, found {record['arm']!r}"
            )
        values[record["arm"]].append(_number(path, lineno, "value", record["value"], positive=False))
    return BlockData(path, "ratio", served=values["served"], candidate=values["candidate"], unpaired=True)


def analyze_blocks_file(path: str | Path, rule: Rule, direction: Direction) -> Verdict:
    """Read a block CSV and give the rule's verdict; refuses a file with too few blocks to reach alpha."""
    b = read_blocks_csv(path)
    if b.unpaired:
        why = unpaired_reason(rule, len(b.served), len(b.candidate))
        if why:
            raise AnalysisError(f"{b.path}: {why}")
        return evaluate_unpaired(rule, b.served, b.candidate, direction, "ratio")
    reason = unreachable_reason(rule, len(b.blocks))
    if reason:
        raise AnalysisError(f"{b.path}: {reason}")
    if b.data == "difference":
        return evaluate_differences(rule, b.differences, direction, b.blocks)
    return evaluate(rule, b.served, b.candidate, direction, b.blocks)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError as exc:
        raise AnalysisError(f"{path}: file not found") from exc
    except IsADirectoryError as exc:
        raise AnalysisError(f"{path}: is a directory, not a CSV file") from exc
    except UnicodeDecodeError as exc:
        raise AnalysisError(f"{path}: not a UTF-8 text file") from exc


def _split(line: str) -> list[str]:
    return next(csv.reader([line]))


def _add_block(path: Path, lineno: int, name: str, seen: dict[str, int]) -> None:
    if not name:
        raise AnalysisError(f"{path}: line {lineno}, column block: empty block name")
    if name in seen:
        raise AnalysisError(f"{path}: line {lineno}: duplicate block {name!r} (first on line {seen[name]})")
    seen[name] = lineno


def _number(path: Path, lineno: int, column: str, text: str, *, positive: bool) -> float:
    where = f"{path}: line {lineno}, column {column}"
    try:
        value = float(text)
    except ValueError as exc:
        raise AnalysisError(f"{where}: not a number: {text!r}") from exc
    if not math.isfinite(value):
        raise AnalysisError(f"{where}: not a finite number: {text!r}")
    if positive and value <= 0:
        raise AnalysisError(f"{where}: must be positive for a ratio, found {text}")
    return value
