"""Phases of every start on the real llama-server: a speed, a fidelity and an agent design run by the
real runner, each start's phases stored (``StartRow.phases``), printed per arm by ``frank analyze`` and
in the note; the cache record and the prefetch of the next start's files beside them."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from conftest import frank
from frankenstein.campaign import open_campaign
from frankenstein.config import ResolvedRecipe
from frankenstein.design.caches import recipe_key
from frankenstein.design import timespent
from frankenstein.shipped import data_path
from helpers_campaign import TOML, make_campaign, make_workload, write_design

pytestmark = pytest.mark.engine

FIDELITY = """\
name = "fq"
kind = "fidelity"
blocks = 1
workload = "workloads/wf.jsonl"

[arms.served]
recipe = "served"

[arms.candidate]
recipe = "served"
parts = ["threads1"]

[rule]
kind = "fidelity"
tolerance = 0.02

[fidelity]
top_k = 8
"""

AGENT = """\
name = "ag"
kind = "agent"
blocks = 1
primary_metric = "passes"

[arms.served]
recipe = "served"

[arms.candidate]
recipe = "served"
parts = ["threads1"]

[rule]
kind = "harm"
alpha = 0.5

[agent]
tasks = ["spec-durations"]
draws = 1
limits = { turns = 1, output_tokens = 8 }
"""

SPEED_PHASES = {"launch", "ready", "warmup", "replay", "scrape", "stop", "caches", "other"}


@pytest.fixture(scope="module")
def camp(tmp_path_factory: pytest.TempPathFactory, llama_server_bin: str) -> Path:
    root = tmp_path_factory.mktemp("phases") / "c"
    toml = TOML.replace('"--seed", "1"]', '"--seed", "1", "--jinja", "--ctx-size", "8192"]')
    make_campaign(root, toml).close()
    make_workload(root / "workloads" / "w.jsonl", turns=3, tokens=8)
    speed = write_design(root / "speed.toml", name="sp", blocks=2, candidate_parts='["draft"]')
    speed.write_text(speed.read_text().replace("alpha = 0.05", "alpha = 0.5"))
    (root / "fq.toml").write_text(FIDELITY)
    (root / "ag.toml").write_text(AGENT)
    fill = ["fidelity", "fill", "served", "-w", str(root / "workloads" / "w.jsonl")]
    r = frank(*fill, "-o", str(root / "workloads" / "wf.jsonl"), "--tokens", "8", "-c", str(root))
    assert r.returncode == 0, r.stderr
    for name, did in (("speed", "sp-1"), ("fq", "fq-1"), ("ag", "ag-1")):
        assert frank("register", str(root / f"{name}.toml"), "-c", str(root)).returncode == 0
        r = frank("run", did, "-c", str(root))
        assert r.returncode == 0, r.stderr
    return root


def _rows(camp: Path, design_id: str) -> list:
    with open_campaign(camp) as c:
        return c.store.starts_of(design_id)


def _check_phases(row, expected: set[str]) -> timespent.StartPhases:
    rec = timespent.read(row.phases)
    assert rec is not None, f"start {row.id} has no phases"
    assert expected <= set(rec.phases), (expected - set(rec.phases), rec.phases)
    assert all(v >= 0 for v in rec.phases.values())
    assert rec.phases["ready"] > 0 and rec.total_s > 0
    assert sum(rec.phases.values()) == pytest.approx(rec.total_s, abs=0.01)  # "other" is the remainder
    assert rec.notes["stopped_by"] == "SIGTERM" and rec.notes["ready_polls"] >= 1
    return rec


def test_speed_starts_record_every_phase(camp: Path) -> None:
    rows = _rows(camp, "sp-1")
    assert len(rows) == 4
    for row in rows:
        rec = _check_phases(row, SPEED_PHASES)
        assert rec.phases["replay"] > 0 and rec.phases["warmup"] > 0
        caches = row.resources["caches"]
        key = recipe_key(ResolvedRecipe.model_validate(row.recipe))
        assert caches["policy"] == "warm" and caches["folder"] == f"caches/{key}/{row.arm}/warm"
        assert rec.write_s is not None and 0 < rec.write_s < 5  # the store's write of this start, per start
    # one run: the starts follow each other, the gap between them is the write and the runner's own work
    gaps = [
        g for g in timespent.gaps([timespent.read(r.phases) for r in sorted(rows, key=lambda r: r.id)]) if g is not None
    ]
    assert len(gaps) == 3 and all(0 <= g < 30 for g in gaps)
    doc = json.loads(json.dumps(timespent.as_json(timespent.summarize(rows))))  # what exports carry
    assert [s["start_id"] for s in doc["per_start"]] == sorted(r.id for r in rows)
    for s, row in zip(doc["per_start"], sorted(rows, key=lambda r: r.id)):
        assert s["phases"] == row.phases["phases"] and s["write_s"] == row.phases["write_s"] and s["arm"] == row.arm
    assert [s["between_s"] is None for s in doc["per_start"]] == [False, False, False, True]
    assert doc["starts"] == 4 and set(doc["per_arm"]) == {"served", "candidate"} and doc["cache"] == "warm"
    assert doc["per_arm"]["served"]["phases"]["ready"] > 0 and 0 < doc["engine_share"] < 1


def test_prefetch_reads_the_next_starts_own_files(camp: Path) -> None:
    """The candidate (draft part) reads the draft model too: a served start followed by a candidate start
    reads exactly the draft file ahead; a candidate start followed by a served one has nothing to read."""
    rows = _rows(camp, "sp-1")
    order = sorted(rows, key=lambda r: r.id)
    draft = data_path("tiny-draft.gguf").stat().st_size
    for row, nxt in zip(order, order[1:]):
        p = row.resources["prefetch"]
        assert p["for"].startswith(f"block {nxt.block + 1}, {nxt.arm}")
        if row.arm == "served" and nxt.arm == "candidate":
            assert p["files"] == 1 and p["bytes_wanted"] == draft and p["mem_available"] > draft
            if p["skipped"] is None:  # read, all of it: the start lasted longer than the read
                assert p["bytes"] == draft and p["stopped"] is False and p["resident_after"] == 1.0
            else:  # a candidate start earlier in the run left the draft file in the page cache
                assert p["skipped"] == "already in the page cache" and p["resident_before"] >= 0.999
        else:
            assert p["skipped"] == "the next start reads the same files as this one" and p["bytes"] == 0
    assert "prefetch" not in order[-1].resources  # the last start has no next start
    for row in order:  # every start: its own model files' share in the page cache when it launched
        cache = row.resources["page_cache"]
        assert cache["files"] == (2 if row.arm == "candidate" else 1) and 0.0 <= cache["resident"] <= 1.0


def test_fidelity_and_agent_starts_record_their_phases(camp: Path) -> None:
    for row in _rows(camp, "fq-1"):
        rec = _check_phases(row, {"launch", "ready", "prepare", "force", "stop"})
        assert rec.phases["force"] > 0
    for row in _rows(camp, "ag-1"):
        rec = _check_phases(row, {"launch", "ready", "tasks", "stop"})
        assert rec.phases["tasks"] > 0


@pytest.mark.parametrize("design_id", ["sp-1", "fq-1", "ag-1"])
def test_analyze_and_the_note_say_where_the_time_went(camp: Path, design_id: str) -> None:
    r = frank("analyze", design_id, "-c", str(camp))
    assert r.returncode == 0, r.stderr
    text = r.stdout[r.stdout.index("where the time went") :]
    table = text.splitlines()[1:4]
    assert "launch → ready" in table[0] and "stop" in table[0] and "total" in table[0]
    assert table[1].split()[:2] == ["served", "2" if design_id == "sp-1" else "1"]
    assert table[2].split()[0] == "candidate"
    assert "starting and stopping engines (launch, ready, stop)" in text
    assert "engine caches: warm (each arm's own cache folders, kept across its starts)" in text


def test_the_note_has_a_where_the_time_went_section(camp: Path, tmp_path: Path) -> None:
    r = frank("report", "-c", str(camp), "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    note = next((tmp_path / "out").rglob("note.md")).read_text()
    assert note.count("### Where the time went") == 3
    section = note[note.index("### Where the time went") :]
    assert "| arm | starts |" in section and "| served | 2 |" in section
    assert "- Engine caches: warm" in section
    reads = sum(1 for r in _rows(camp, "sp-1") if r.resources.get("prefetch", {}).get("bytes"))
    mib = reads * data_path("tiny-draft.gguf").stat().st_size / 2**20
    said = f"{reads} start(s) read {mib:.1f} MiB" if reads else "none read"
    assert f"- Prefetch of the next start's files: {said}" in section
    assert "- Model files in the page cache when the start launched: all of them for " in section


def test_analyze_json_exports_every_starts_phases(camp: Path) -> None:
    r = frank("analyze", "sp-1", "-c", str(camp), "--json")
    assert r.returncode == 0, r.stderr
    per_start = json.loads(r.stdout)["time_spent"]["per_start"]
    rows = {row.id: row for row in _rows(camp, "sp-1")}
    assert sorted(s["start_id"] for s in per_start) == sorted(rows) and len(per_start) == 4
    for s in per_start:
        stored = rows[s["start_id"]].phases
        assert s["phases"] == stored["phases"] and s["total_s"] == stored["total_s"]
        assert s["write_s"] == stored["write_s"] > 0 and s["notes"]["stopped_by"] == "SIGTERM"


def test_replay_stores_and_exports_its_starts_phases(camp: Path) -> None:
    """``frank replay`` records its start as a design's are: phases (write included), caches, machine."""
    r = frank("replay", "base", str(camp / "workloads" / "w.jsonl"), "-c", str(camp), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    exported = doc["phases"]
    assert SPEED_PHASES <= set(exported["phases"]) and exported["notes"]["stopped_by"] == "SIGTERM"
    assert exported["phases"]["ready"] > 0 and exported["phases"]["replay"] > 0 and exported["write_s"] > 0
    with sqlite3.connect(camp / "frank.db") as db:
        (text,) = db.execute("SELECT resources FROM starts WHERE id = ?", (doc["start_id"],)).fetchone()
    stored = json.loads(text)
    assert stored["phases"]["phases"] == exported["phases"] and stored["phases"]["write_s"] == exported["write_s"]
    assert stored["caches"]["folder"].endswith("/replay/warm") and stored["caches"]["policy"] == "warm"
    assert "machine" in stored and "load" in stored
