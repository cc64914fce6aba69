"""What the tamper tests share: a speed design of two command arms (a tiny script prints the metric) that
registers and runs in a second, and the forger's tool that recomputes every chain row from one record on
with our own hashing code, as a gaming script would."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

from frankenstein import chain
from frankenstein.store import _link, _record

BENCH = """\
import json, sys
print(json.dumps({"verify_step_ms": float(sys.argv[1]), "tokens_per_step": 1.0}))
"""

COMMAND_DESIGN = """\
name = "{name}"
kind = "speed"
blocks = {blocks}
primary_metric = "verify_step_ms"

[arms.served]
command = ["{py}", "{bench}", "2.0"]

[arms.candidate]
command = ["{py}", "{bench}", "1.5"]

[rule]
kind = "all_blocks_better"
alpha = {alpha}
"""


def write_command_design(root: Path, name: str, *, blocks: int, alpha: float) -> Path:
    """``root/NAME.toml``: the candidate's script prints 1.5 ms, the served arm's 2.0 ms, every block."""
    bench = root / "bench.py"
    bench.write_text(BENCH)
    path = root / f"{name}.toml"
    path.write_text(COMMAND_DESIGN.format(name=name, blocks=blocks, alpha=alpha, py=sys.executable, bench=bench))
    return path


def rewrite_chain_from(conn: sqlite3.Connection, first: int) -> None:
    """Recompute the digest and link of chain record ``first`` and every record after it."""
    prev = _link(conn.execute("SELECT * FROM chain WHERE seq = ?", (first - 1,)).fetchone()) if first > 1 else None
    for r in conn.execute("SELECT * FROM chain WHERE seq >= ? ORDER BY seq", (first,)).fetchall():
        lab, tables = _record(conn, r["kind"], r["ref"])
        link = chain.make_link(prev, r["kind"], r["ref"], lab, chain.digest(tables))
        conn.execute(
            "UPDATE chain SET digest = ?, prev_hash = ?, row_hash = ? WHERE seq = ?",
            (link.digest, link.prev_hash, link.row_hash, link.seq),
        )
        prev = link
