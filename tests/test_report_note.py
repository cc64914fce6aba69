"""The progress note rendered from stored campaigns, compared with golden files.

The store is built directly: designs through the real registry, starts through ``Store.insert_start``
with fixed metrics and resources, ledger steps through the real ``adopt``/``revert``; no engine runs.
Registration draws a fresh seed and timestamp and the campaign lives in a temporary folder, so those
few values are replaced by placeholders before comparing. Regenerate the golden files after an intended
change with ``FRANK_UPDATE_GOLDEN=1 .venv/bin/pytest -q tests/test_report_note.py``.
"""

from __future__ import annotations

import json
import os
import re
from datetime import date
from pathlib import Path

import jsonschema
import pytest

from frankenstein import ledger
from frankenstein.design.registry import register
from frankenstein.errors import DesignError, LedgerError
from frankenstein.report import write_report
from frankenstein.shipped import data_path

from helpers_campaign import make_campaign, make_workload, write_design
from helpers_ledger import CONFIRMED, MIXED, golden, gpu, is_png, stored_design

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("FRANK_UPDATE_GOLDEN") == "1"
LIMITS = ["Step time, not task time", "Measured without the region cache."]


@pytest.fixture
def camp(tmp_path: Path):
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl")
    yield c
    c.close()


def normalise(text: str, camp, regs) -> str:
    text = text.replace(str(camp.root), "<campaign>").replace(str(data_path("tiny-target.gguf").parent), "<data>")
    machine = ("- engine binary ", "- library ")  # the served recipe's pins that differ per machine and build
    text = "\n".join(line for line in text.split("\n") if not line.startswith(machine))
    for i, reg in enumerate(regs, 1):
        text = text.replace(reg.registered_at, f"<registered-{i}>").replace(reg.design_hash[:16], f"<hash-{i}>")
    return text


def build_story(camp) -> list:
    """A week of a campaign: an adoption, a refusal then a forced adoption and its revert, a curtailed
    design, one with a failed start, and a registration refused for too few blocks."""
    gpu_res = lambda arm, b: gpu(20480.0 if arm == "served" else 20736.0 + 8 * b, 310.0 if arm == "served" else 295.0)  # noqa: E731
    regs = [
        stored_design(
            camp,
            name="draft-speed",
            served=CONFIRMED[0],
            candidate=CONFIRMED[1],
            resources=gpu_res,
            extra=f"limits = {json.dumps(LIMITS)}\n[gates]\nmemory_mib = 512",
        )
    ]
    ledger.adopt(camp, "draft", regs[0].design_id)
    regs.append(stored_design(camp, name="threads", parts='["threads1"]', served=MIXED[0], candidate=MIXED[1], day=2))
    with pytest.raises(LedgerError):
        ledger.adopt(camp, "threads1", regs[1].design_id)
    ledger.adopt(camp, "threads1", regs[1].design_id, force=True, why="vendor benchmark at concurrency 8")
    ledger.revert(camp, why="no evidence on our workload")
    regs.append(
        stored_design(
            camp,
            name="curtailed",
            parts='["threads1"]',
            blocks=10,
            served=[10.0, 10.0],
            candidate=[10.5, 10.6],
            extra='stopping = "curtail"',
            day=3,
        )
    )
    regs.append(
        stored_design(
            camp,
            name="dropped",
            parts='["threads1"]',
            served=CONFIRMED[0],
            candidate=CONFIRMED[1],
            fail=lambda arm, b: "engine exited 139 before ready" if (arm, b) == ("candidate", 3) else None,
            day=4,
        )
    )
    with pytest.raises(DesignError):
        register(camp, write_design(camp.root / "tiny.toml", name="tiny", blocks=4))
    return regs


def test_note_of_a_campaign_matches_golden(camp, tmp_path: Path) -> None:
    regs = build_story(camp)
    note = write_report(camp, tmp_path / "out")
    assert note == tmp_path / "out" / "note.md"
    golden(normalise(note.read_text(), camp, regs), GOLDEN / "note_campaign.md", UPDATE)
    text = note.read_text()
    # the absolute difference in the metric's unit beside every ratio (summary and block table)
    assert "ratio 0.8132 (-18.68%; candidate − served -1.88 ms per step on average)" in text
    assert "| candidate − served (ms per step) | -2.0 | -1.9 | -1.8 | -1.9 | -1.6 | -2.1 | -1.88 |" in text
    assert "| served | 10.0 | 10.2 | 9.9 | 10.1 | 10.0 | 10.3 | 10.08 |" in text  # trailing zeros kept
    # the design's own limits, after the generated lines of its section, each as registered
    section = text.split("## Design `draft-speed-1`")[1].split("## Design")[0]
    shows = section.split("### What this does and does not show")[1].split("###")[0]
    assert shows.rstrip().endswith("- Step time, not task time.\n- Measured without the region cache.")

    # note.json beside it: every table of the note, valid under its schema, each with its design's hash
    doc = json.loads((tmp_path / "out" / "note.json").read_text())
    jsonschema.validate(doc, json.loads(data_path("schemas/note.schema.json").read_text()))
    rules = [line for line in note.read_text().splitlines() if re.fullmatch(r"\| (---:?)( \| ---:?)* \|", line)]
    assert len(doc["tables"]) == len(rules) > len(regs)
    hashes = {r.design_id: r.design_hash for r in regs}
    assert all(t["design_hash"] == hashes[t["design_id"]] for t in doc["tables"] if t["design_id"])
    assert "Credits" in {t["section"] for t in doc["tables"]}
    pngs = sorted(p.name for p in (tmp_path / "out").glob("*.png"))
    assert pngs == [
        "curtailed-1-blocks.png",
        "draft-speed-1-blocks.png",
        "dropped-1-blocks.png",
        "threads-1-blocks.png",
    ]
    assert all(is_png(tmp_path / "out" / p) for p in pngs)


def test_limits_leave_the_hash_of_a_design_without_them_unchanged(camp) -> None:
    plain = register(camp, write_design(camp.root / "plain.toml", name="plain", blocks=5))
    assert "limits" not in plain.frozen.model_dump(mode="json")["design"]
    row = camp.store.query("SELECT canonical FROM registry WHERE design_id = ?", (plain.design_id,))[0]
    assert "limits" not in json.loads(row["canonical"])["frozen"]["design"]  # the stored, hashed text
    stated = register(camp, write_design(camp.root / "stated.toml", name="plain", blocks=5, extra='limits = ["x"]'))
    assert stated.frozen.design.limits == ["x"] and stated.design_hash != plain.design_hash
    with pytest.raises(DesignError, match="limits"):
        register(camp, write_design(camp.root / "bad.toml", name="bad", blocks=5, extra='limits = "one string"'))


def test_note_is_the_same_text_when_written_twice(camp, tmp_path: Path) -> None:
    build_story(camp)
    a = write_report(camp, tmp_path / "a").read_text()
    b = write_report(camp, tmp_path / "b").read_text()
    assert a == b


def test_note_of_an_empty_campaign_matches_golden(camp, tmp_path: Path) -> None:
    golden(write_report(camp, tmp_path / "out").read_text(), GOLDEN / "note_empty.md", UPDATE)


def test_since_leaves_out_earlier_records(camp, tmp_path: Path) -> None:
    build_story(camp)
    later = write_report(camp, tmp_path / "later", since=date(2999, 1, 1)).read_text()
    assert "since 2999-01-01: 0 design(s), 0 ledger step(s)" in later
    assert "## Design" not in later and "- Nothing recorded yet." in later
    assert (
        "| `draft` | https://github.com/ggml-org/llama.cpp | abc123 | ggml-org | MIT | step 1 |" in later
    )  # credits: now
    every = write_report(camp, tmp_path / "all", since="2000-01-01").read_text()
    assert every.count("\n## Design ") == 4


def test_registration_refusals_are_kept(camp) -> None:
    with pytest.raises(DesignError) as e:
        register(camp, write_design(camp.root / "tiny.toml", name="tiny", blocks=4))
    [r] = camp.store.refusals()
    assert (r.what, r.name, r.path, r.reason) == ("registration", "tiny", str(camp.root / "tiny.toml"), str(e.value))
