"""Part status in the ledger (frankenstein.part_status): park, stop and unpark are chained ledger steps with
their reason and the designs they rest on; `frank served` and the note list every part by status. And
predictions: a screen's registered ``predicts`` against a later design of the same part, in analyze and
the note. Real CLI (subprocess) on real store rows."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from conftest import frank
from frankenstein import part_status
from frankenstein.campaign import open_campaign
from frankenstein.errors import LedgerError

from helpers_campaign import TOML, make_campaign, make_workload
from helpers_ledger import CONFIRMED, MIXED, stored_design

PARTS = (
    TOML
    + """
[parts.claim]
description = "a work-claiming split for the CPU-expert pool"
args = ["--batch-size", "128"]

[parts.kernel]
description = "our own decode kernel for the GPU-resident experts"
args = ["--batch-size", "64"]
"""
)


@pytest.fixture
def camp(tmp_path: Path):
    c = make_campaign(tmp_path / "c", toml=PARTS)
    make_workload(c.root / "workloads" / "w.jsonl")
    stored_design(c, name="claim-bench", parts='["claim"]', served=MIXED[0], candidate=MIXED[1])
    stored_design(c, name="kernel-screen", parts='["kernel"]', served=MIXED[0], candidate=MIXED[1])
    stored_design(c, name="good", served=CONFIRMED[0], candidate=CONFIRMED[1])
    yield c
    c.close()


def test_park_stop_unpark_through_the_cli_with_served_and_the_note(camp, tmp_path: Path) -> None:
    root = str(camp.root)
    assert frank("adopt", "draft", "--design", "good-1", "-c", root).returncode == 0
    r = frank(
        "park", "claim", "--why", "8.2-8.7% longer per job on the CPU benchmark", "-d", "claim-bench-1", "-c", root
    )
    assert r.returncode == 0, r.stderr
    assert (
        r.stdout.strip()
        == "step 2: parked claim (rests on claim-bench-1): 8.2-8.7% longer per job on the CPU benchmark"
    )
    r = frank(
        "stop", "kernel", "--why", "no build reached the 0.079 ms saving required", "-d", "kernel-screen-1", "-c", root
    )
    assert r.returncode == 0, r.stderr

    r = frank("served", "-c", root)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "served: base + draft"  # a status step never changes the served parts
    tail = r.stdout.split("\nparts:\n", 1)[1].splitlines()
    assert tail == [
        "  served        draft",
        "  parked        claim [step 2]: 8.2-8.7% longer per job on the CPU benchmark (designs claim-bench-1)",
        "  stopped       kernel [step 3]: no build reached the 0.079 ms saving required (designs kernel-screen-1)",
        "  never tested  threads1",
    ]
    assert "    2  " in r.stdout and "park claim  designs claim-bench-1  why: 8.2-8.7% longer" in r.stdout

    out = tmp_path / "note"
    assert frank("report", "--out", str(out), "-c", root).returncode == 0
    note = (out / "note.md").read_text()
    assert (
        "- **parked** `claim` (step 2, rests on `claim-bench-1`): 8.2-8.7% longer per job on the CPU benchmark." in note
    )
    didnt = note.split("## What didn't work", 1)[1].split("## Parts by status")[0]
    assert (
        "- `kernel`: stopped (step 3): no build reached the 0.079 ms saving required; rests on `kernel-screen-1`."
        in didnt
    )
    table = note.split("## Parts by status", 1)[1]
    assert "| `claim` | parked | 8.2-8.7% longer per job on the CPU benchmark | `claim-bench-1` | 2 |" in table
    assert "| `threads1` | never tested | — | — | — |" in table

    r = frank("unpark", "claim", "--why", "new job shapes from the 1M-token workload", "-c", root)
    assert r.returncode == 0, r.stderr
    assert "  tested        claim (designs claim-bench-1)" in frank("served", "-c", root).stdout
    assert frank("verify", "-c", root).returncode == 0  # every status step is in the evidence chain


def test_bad_status_requests_are_refused_with_one_message(camp) -> None:
    root = str(camp.root)
    cases = [
        (("park", "claim", "-c", root), 2, "--why"),
        (("park", "claim", "--why", "  ", "-c", root), 1, "park needs --why TEXT"),
        (("park", "nope", "--why", "x", "-c", root), 1, "PART: unknown part 'nope'"),
        (("stop", "claim", "--why", "x", "-d", "nope-1", "-c", root), 1, "--design nope-1: no registered design"),
        (("unpark", "claim", "--why", "x", "-c", root), 1, "part 'claim' is tested, not parked or stopped"),
    ]
    for args, code, message in cases:
        r = frank(*args)
        assert r.returncode == code and message in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
    assert frank("adopt", "draft", "--design", "good-1", "-c", root).returncode == 0
    r = frank("park", "draft", "--why", "x", "-c", root)
    assert r.returncode == 1 and "part 'draft' is served (base + draft)" in r.stderr and "not parked" in r.stderr
    with open_campaign(camp.root) as c:
        assert [e.action for e in c.store.ledger_steps()] == ["adopt"]  # nothing written by a refusal


def test_revert_undoes_a_status_step(camp) -> None:
    part_status.park(camp, "claim", "slower", ["claim-bench-1"])
    part_status.stop(camp, "claim", "slower again", [])
    assert {s.part: s.status for s in part_status.part_statuses(camp)}["claim"] == "stopped"
    from frankenstein.ledger import revert

    revert(camp, why="stopped too early")
    assert {s.part: (s.status, s.why) for s in part_status.part_statuses(camp)}["claim"] == ("parked", "slower")
    revert(camp, why="re-apply")  # a revert of the revert puts the stop back
    assert {s.part: s.status for s in part_status.part_statuses(camp)}["claim"] == "stopped"
    with pytest.raises(LedgerError, match="nothing to unpark"):
        part_status.unpark(camp, "threads1", "x", [])


def test_a_store_written_before_status_steps_migrates_and_still_verifies(camp) -> None:
    """A campaign whose ledger table still has the old CHECK (adopt, revert) is rebuilt on open: its steps
    and their chain digests unchanged, and a park step can then be written."""
    from frankenstein.ledger import adopt

    adopt(camp, "draft", "good-1")
    db = camp.root / "frank.db"
    camp.close()
    con = sqlite3.connect(db)
    rows = con.execute("SELECT * FROM ledger").fetchall()
    con.executescript(
        """
        DROP TABLE ledger;
        CREATE TABLE ledger (seq INTEGER PRIMARY KEY, action TEXT NOT NULL CHECK (action IN ('adopt', 'revert')),
            part TEXT NOT NULL, design_id TEXT, scope TEXT NOT NULL DEFAULT '{}', forced INTEGER NOT NULL DEFAULT 0,
            why TEXT, parts TEXT NOT NULL, at TEXT NOT NULL);
        DELETE FROM migrations WHERE name = '0007_ledger_part_status';
        """
    )
    con.executemany("INSERT INTO ledger VALUES (?,?,?,?,?,?,?,?,?)", rows)
    con.commit()
    con.close()
    with open_campaign(camp.root) as c:
        assert [(e.seq, e.action) for e in c.store.ledger_steps()] == [(1, "adopt")]
        part_status.park(c, "claim", "slower", [])
    r = frank("verify", "-c", str(camp.root))
    assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------- predicts

SERVED = [14.359, 14.348, 14.444, 14.407, 14.360]  # the campaign note's overlap design, ms per verify step
OVERLAP = [13.684, 13.685, 13.665, 13.666, 13.706]


def test_a_screens_prediction_is_compared_with_the_later_design_in_analyze_and_the_note(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl")
    stored_design(
        c, name="screen", kind="screen", served=[15.0] * 5, candidate=[14.58] * 5, extra='predicts = "-0.42 ms"'
    )
    stored_design(c, name="overlap", served=SERVED, candidate=OVERLAP, rule="all_blocks_better")
    root = str(c.root)
    c.close()
    r = frank("analyze", "overlap-1", "-c", root)
    assert r.returncode == 0, r.stderr
    want = "0.702 ms saved, 1.67 times the 0.42 ms predicted by screen-1 (0.282 ms more; mean of 5 blocks)"
    assert f"  {want}" in r.stdout.splitlines()
    pred = json.loads(frank("analyze", "overlap-1", "--json", "-c", root).stdout)["predictions"]
    assert [(p["design_id"], p["predicted"], p["unit"], p["blocks"]) for p in pred] == [("screen-1", -0.42, "ms", 5)]
    assert pred[0]["observed"] == pytest.approx(-0.7024) and pred[0]["ratio"] == pytest.approx(0.7024 / 0.42)
    r = frank("analyze", "screen-1", "-c", root)
    assert "predicted by" not in r.stdout  # a design is not compared with itself
    out = tmp_path / "note"
    assert frank("report", "--out", str(out), "-c", root).returncode == 0
    assert f"**Predicted:** `verify_step_ms`: {want}." in (out / "note.md").read_text()


@pytest.mark.parametrize(
    ("predicts", "message"),
    [
        ('"-0.42 s"', "'-0.42 s' is in 's', but verify_step_ms is in ms"),
        ('"fast"', "'fast' is not a number"),
        ('"0 ms"', "a prediction is a non-zero finite effect"),
    ],
)
def test_a_bad_prediction_is_refused_naming_the_field(tmp_path: Path, predicts: str, message: str) -> None:
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl")
    from frankenstein.errors import DesignError

    with pytest.raises(DesignError) as exc:
        stored_design(c, name="s", served=[1.0] * 5, candidate=[1.0] * 5, extra=f"predicts = {predicts}")
    assert "s.toml: predicts: " in str(exc.value) and message in str(exc.value), str(exc.value)
    assert not c.store.registry_rows()
