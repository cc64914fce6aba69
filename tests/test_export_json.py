"""Exports: `frank analyze --json`, `frank replay --json/--csv` and note.json, compared with golden files
under tests/golden/exports/ and validated against the shipped JSON Schemas (docs/exports.md).

Volatile values are masked before comparing (``mask``, as docs/exports.md describes): design and
workload hashes become "<hash>", stored timestamps "<time>", the campaign folder "<campaign>",
``time_spent`` (design/timespent.py's own export, checked by the schema and its owner's tests) "<phases>", and in
replay exports every timing (keys ending ``_ms``, ``_ms_per_token`` or ``_per_s``, and the percentiles
p50/p90/p99) "<ms>", a list of timings (``chunk_gaps_ms``) "<ms list>", the count of pooled gaps (``itl_ms``
``n``, which varies when events coalesce) "<n>", and the engine version "<version>". Regenerate after an intended change with
``FRANK_UPDATE_GOLDEN=1 .venv/bin/pytest -q tests/test_export_json.py``.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import os
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from frankenstein import ledger
from frankenstein.cli import main
from frankenstein.config import ResolvedRecipe
from frankenstein.design.start import StartOutcome
from frankenstein.design.registry import register
from frankenstein.report import write_report
from frankenstein.report.collect import collect
from frankenstein.report.export import note_doc, replay_doc
from frankenstein.report.markdown import capture_tables, md_table
from frankenstein.report.note import render_note
from frankenstein.shipped import data_path

from helpers_campaign import make_campaign, make_workload, write_design
from helpers_ledger import golden

GOLDEN = Path(__file__).parent / "golden" / "exports"
UPDATE = os.environ.get("FRANK_UPDATE_GOLDEN") == "1"
HASH = re.compile(r"\b[0-9a-f]{16}([0-9a-f]{48})?\b")
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z?")
TIMING = re.compile(r"(_ms|_per_s|_ms_per_token)$|^p(50|90|99)$")


def schema(name: str) -> dict[str, Any]:
    return json.loads(data_path(f"schemas/{name}.schema.json").read_text())


def check(doc: dict[str, Any], name: str) -> None:
    jsonschema.Draft202012Validator.check_schema(schema(name))
    jsonschema.validate(doc, schema(name), cls=jsonschema.Draft202012Validator)


def mask(x: Any, root: Path, timings: bool = False, key: str = "") -> Any:
    """The documented masking: hashes, timestamps, the campaign folder; timings too for replay exports."""
    if isinstance(x, dict):
        out = {
            k: "<phases>" if k in ("time_spent", "phases") and v else mask(v, root, timings, k) for k, v in x.items()
        }
        if timings and key == "itl_ms" and "n" in out:
            out["n"] = "<n>"
        return out
    if timings and isinstance(x, list) and TIMING.search(key):
        return "<ms list>"
    if isinstance(x, list):
        return [mask(v, root, timings, key) for v in x]
    if timings and isinstance(x, int | float) and not isinstance(x, bool) and TIMING.search(key):
        return "<ms>"
    if key == "engine_version" and timings:
        return "<version>"
    if isinstance(x, str):
        return TIME.sub("<time>", HASH.sub("<hash>", x.replace(str(root), "<campaign>")))
    return x


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(args)
    out = capsys.readouterr()
    return int(info.value.code or 0), out.out, out.err


def _turns(arm: str, b: int) -> list[dict[str, Any]]:
    """Fixed per-turn rows: a warm-up turn, then three measured ones (client and server times)."""
    base = 40.0 if arm == "served" else 30.0
    return [
        {
            "idx": i,
            "turn_id": f"s1-{i:04d}",
            "warmup": int(i == 0),
            "ttft_ms": base + i + b,
            "e2e_ms": base * 4 + 2 * i,
            "generated_tokens": 16,
            "decode_ms": base * 3,
            "prompt_ms": 5.0,
            "pre_ms": base + i + b - 5.0,
            "post_ms": base + 2 * i - (base + i + b) - 2.0 * (arm == "served"),  # negative for some turns
            "chunk_gaps_ms": [base / 8 + i, base / 8, base / 4 + b],
        }
        for i in range(4)
    ]


@pytest.fixture
def camp(tmp_path: Path):
    """A confirmed design with per-turn rows, one failed start (a dropped block), adopted; a second design
    with no starts."""
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl")
    reg = register(c, write_design(c.root / "speed.toml", name="speed", blocks=6))
    for b in range(6):
        for pos, arm in enumerate(reg.schedule[b]):
            failed = (b, arm) == (2, "candidate")
            c.store.insert_start(
                design_id=reg.design_id,
                block=b,
                position=pos,
                arm=arm,
                status="failed" if failed else "ok",
                reason="engine exited 139 before ready" if failed else None,
                started_at=f"2025-03-01T10:{b:02d}:{pos * 30:02d}.000Z",
                metrics={}
                if failed
                else {"verify_step_ms": 10.0 + b / 10 if arm == "served" else 8.0 + b / 10, "tokens_per_step": 1.0},
                turns=[] if failed else _turns(arm, b),
                engine="llamacpp",
                engine_version="b6000 (test build)",
            )
    ledger.adopt(c, "threads1", reg.design_id)
    register(c, write_design(c.root / "later.toml", name="later", blocks=5))
    yield c, reg
    c.close()


def test_analyze_json_matches_golden_and_schema(camp, capsys: pytest.CaptureFixture[str]) -> None:
    c, reg = camp
    rc, out, err = run(["analyze", reg.design_id, "-c", str(c.root), "--json"], capsys)
    assert (rc, err) == (0, "")
    doc = json.loads(out)
    check(doc, "analysis")
    assert doc["design"]["hash"] == reg.design_hash and doc["word"] == "confirmed"
    assert doc["p"] == {"exact": "1/32", "value": 0.03125, "scipy": 0.03125}
    assert doc["dropped"] == ["block 3: candidate start failed (engine exited 139 before ready); block dropped"]
    assert doc["percentiles"]["served"]["ttft_ms"]["n"] == 18  # 6 ok starts x 3 measured turns
    golden(json.dumps(mask(doc, c.root), indent=2, sort_keys=True) + "\n", GOLDEN / "analyze.json", UPDATE)
    # the text output prints the same percentiles, as secondary numbers
    rc, text, _ = run(["analyze", reg.design_id, "-c", str(c.root)], capsys)
    assert (
        "latency percentiles per arm over measured turns, ms (reported, not tested; linear interpolation; "
        "n: turns, pooled chunk gaps for itl_ms; post_ms can be negative):" in text
    )
    for metric in ("pre_ms", "post_ms"):
        s = doc["percentiles"]["served"][metric]
        p50 = re.escape(f"{s['p50']:.4g}")
        assert re.search(rf"served\s+{metric}\s+18\s+{p50}\s", text), text
    served_ttft = doc["percentiles"]["served"]["ttft_ms"]
    assert re.search(rf"served\s+ttft_ms\s+18\s+{served_ttft['p50']:.4g}\s", text)


def test_starts_that_were_not_fresh_are_said_in_text_and_json(tmp_path: Path, capsys) -> None:
    """Starts recorded against a server already running (capabilities.fresh_start false, as the external
    engine records them): analyze says so in a note line and in not_fresh."""
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl")
    reg = register(c, write_design(c.root / "d.toml", name="ext", blocks=5))
    for b in range(5):
        for pos, arm in enumerate(reg.schedule[b]):
            c.store.insert_start(
                design_id=reg.design_id,
                block=b,
                position=pos,
                arm=arm,
                status="ok",
                started_at="2025-03-01T10:00:00Z",
                metrics={"verify_step_ms": 10.0 if arm == "served" else 9.0},
                capabilities={"fresh_start": arm == "served"},
            )
    c.close()
    _, out, _ = run(["analyze", reg.design_id, "-c", str(c.root), "--json"], capsys)
    doc = json.loads(out)
    check(doc, "analysis")
    assert doc["not_fresh"] == ["candidate"]
    _, text, _ = run(["analyze", reg.design_id, "-c", str(c.root)], capsys)
    assert text.splitlines()[-1].startswith("note: Starts were not fresh: arm(s) candidate ran against a server")


def test_note_json_has_every_table_of_the_note(camp, tmp_path: Path) -> None:
    c, reg = camp
    note = write_report(c, tmp_path / "out")
    doc = json.loads((tmp_path / "out" / "note.json").read_text())
    check(doc, "note")
    for d in doc["designs"]:
        if d["analysis"] is not None:
            check(d["analysis"], "analysis")
    md = note.read_text().splitlines()
    assert len(doc["tables"]) == sum(1 for line in md if re.fullmatch(r"\| (---:?)( \| ---:?)* \|", line)) >= 4
    by_caption = {t["caption"]: t for t in doc["tables"]}
    lat = by_caption[
        "Latency percentiles per arm over measured turns, ms (reported, not tested; linear interpolation; "
        "n: turns, pooled chunk gaps for itl_ms; post_ms can be negative):"
    ]
    assert (lat["design_id"], lat["design_hash"]) == (reg.design_id, reg.design_hash)
    assert lat["header"] == ["arm", "metric", "n", "p50", "p90", "p99"]
    metrics = [row[1] for row in lat["rows"] if row[0] == "served"]
    assert metrics == ["ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "pre_ms", "post_ms"]
    itl = next(row for row in lat["rows"] if row[:2] == ["served", "itl_ms"])
    assert itl[2] == "54"  # 6 ok starts x 3 measured turns x 3 gaps: pooled gaps, not turns
    credits = next(t for t in doc["tables"] if t["section"] == "Credits")
    assert credits["design_id"] is None and credits["rows"][0][0] == "`threads1`"
    golden(json.dumps(mask(doc, c.root), indent=2, sort_keys=True) + "\n", GOLDEN / "note.json", UPDATE)


def test_a_table_any_section_renders_is_exported(camp) -> None:
    """A section another module adds (here: one built inline, as report/hosts.py would) needs no code in
    the exporter: md_table records it; a table rendered but left out of the note is not exported."""
    c, reg = camp
    data = collect(c)
    with capture_tables() as tables:
        md_table(["dropped"], [["x"]], "l")  # rendered, never part of the note
        lines = render_note(data, {})
        lines += ["", "## Hosts", "", "Hosts that ran starts:", "", *md_table(["host", "starts"], [["a|b", "3"]], "lr")]
    doc = note_doc(data, tables, lines)
    check(doc, "note")
    last = doc["tables"][-1]
    assert (last["section"], last["caption"], last["design_id"]) == ("Hosts", "Hosts that ran starts:", None)
    assert last["rows"] == [["a|b", "3"]] and last["numbers"] == [[None, 3.0]]
    assert len(doc["tables"]) == len(tables) - 1 and all(t["header"] != ["dropped"] for t in doc["tables"])


def test_blocks_json_matches_golden_and_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "b.csv"
    p.write_text("block,served,candidate\n1,10,9\n2,10,9.5\n3,10,9.8\n4,10,9.1\n5,10,9.9\n")
    rc, out, err = run(["analyze", "--blocks", str(p), "--rule", "sign", "--direction", "lower", "--json"], capsys)
    assert (rc, err) == (0, "")
    doc = json.loads(out)
    check(doc, "verdict")
    assert (doc["word"], doc["p"]["exact"], doc["interval"]["coverage"]) == ("confirmed", "1/32", "15/16")
    golden(json.dumps(mask(doc, tmp_path), indent=2, sort_keys=True) + "\n", GOLDEN / "blocks.json", UPDATE)
    bad = copy.deepcopy(doc)
    bad["verdict"]["rows"][0]["favours"] = "both"
    with pytest.raises(jsonschema.ValidationError):
        check(bad, "verdict")


# ---------------------------------------------------------------- a drifted output fails the schema


def _drifts() -> list[tuple[str, str, Any]]:
    """(schema, what drifts, a function that breaks a copy of a valid document)."""

    def set_(path: list[Any], value: Any) -> Any:
        def go(doc: dict[str, Any]) -> None:
            for k in path[:-1]:
                doc = doc[k]
            doc[path[-1]] = value

        return go

    def rename(path: list[Any], new: str) -> Any:
        def go(doc: dict[str, Any]) -> None:
            for k in path[:-1]:
                doc = doc[k]
            doc[new] = doc.pop(path[-1])

        return go

    return [
        ("analysis", "version bumped without a new schema", set_(["version"], 3)),
        ("analysis", "the version before the percentiles changed", set_(["version"], 1)),
        ("analysis", "a pre_ms percentile as text", set_(["percentiles", "served", "pre_ms", "p50"], "30 ms")),
        ("note", "the version before the percentiles changed", set_(["version"], 1)),
        ("analysis", "a key renamed", rename(["dropped"], "dropped_blocks")),
        ("analysis", "a key added", set_(["extra"], 1)),
        ("analysis", "p as a float instead of a fraction", set_(["p", "exact"], 0.03125)),
        ("analysis", "a percentile as text", set_(["percentiles", "served", "ttft_ms", "p99"], "12 ms")),
        ("analysis", "a percentile metric misspelt", rename(["percentiles", "served", "ttft_ms"], "ttft")),
        ("analysis", "blocks counted from 0", rename(["per_block", "verify_step_ms", "1"], "0")),
        ("analysis", "a truncated design hash", set_(["design", "hash"], "abc123")),
        ("note", "a table without its design hash", lambda d: d["tables"][0].pop("design_hash")),
        ("note", "a number cell as text", set_(["tables", 0, "numbers", 0], ["1.5"])),
        ("note", "an unknown schema name", set_(["schema"], "frank.notes")),
    ]


@pytest.mark.parametrize(("name", "what", "drift"), _drifts(), ids=[w for _, w, _ in _drifts()])
def test_a_drifted_output_fails_the_schema(camp, tmp_path: Path, capsys, name: str, what: str, drift: Any) -> None:
    c, reg = camp
    if name == "analysis":
        _, out, _ = run(["analyze", reg.design_id, "-c", str(c.root), "--json"], capsys)
        doc = json.loads(out)
    else:
        write_report(c, tmp_path / "out")
        doc = json.loads((tmp_path / "out" / "note.json").read_text())
    check(doc, name)
    bad = copy.deepcopy(doc)
    drift(bad)
    with pytest.raises(jsonschema.ValidationError):
        check(bad, name)


def test_a_drifted_replay_export_fails_the_schema() -> None:
    """The replay document from a start's outcome as measure_start returns it (no engine here)."""
    recipe = ResolvedRecipe(name="base", engine="llamacpp", model="m.gguf", args=[], env={})
    rows = _turns("served", 0)  # warmup stored as 0/1
    out = StartOutcome(status="ok", reason=None, started_at="2025-03-01T10:00:00Z", recipe=recipe, rows=rows)
    out.metrics = {"ttft_ms": 41.0, "turns": 3.0}
    doc = replay_doc(7, out)
    check(doc, "replay")
    assert doc["turns"][0]["warmup"] is True and doc["percentiles"]["tpot_ms"]["n"] == 3
    assert doc["percentiles"]["itl_ms"]["n"] == 9 and doc["turns"][1]["metrics"]["chunk_gaps_ms"] == [6.0, 5.0, 10.0]
    for drift in (
        lambda d: d["turns"][0].update(warmup=1),  # the stored 0/1, not a boolean
        lambda d: d["metrics"].update(ttft_ms="41 ms"),
        lambda d: d["turns"][1].pop("error"),
        lambda d: d.update(status="done"),
        lambda d: d["percentiles"].update(tbt_ms=d["percentiles"]["itl_ms"]),
        lambda d: d["turns"][1]["metrics"].update(chunk_gaps_ms="6.0,5.0"),
        lambda d: d["turns"][1]["metrics"].update(chunk_gaps_ms=[-1.0]),
        lambda d: d.update(version=1),
    ):
        bad = copy.deepcopy(doc)
        drift(bad)
        with pytest.raises(jsonschema.ValidationError):
            check(bad, "replay")


# ---------------------------------------------------------------- frank replay --json / --csv (real engine)


@pytest.mark.engine
def test_replay_json_and_csv_match_golden_and_schema(
    llama_server_bin: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c = make_campaign(tmp_path / "c")
    w = make_workload(c.root / "workloads" / "w.jsonl", turns=3, tokens=8)
    c.close()
    rc, out, err = run(["replay", "base", str(w), "-c", str(c.root), "--json"], capsys)
    assert rc == 0
    doc = json.loads(out)  # stdout is the export alone; progress lines went to stderr
    assert re.match(r"frank replay \[0:00:\d\d\] start 1/1 begins: replay base\n", err)
    assert re.search(r"start 1/1 ends after [\d.]+ s: replay base\n", err)
    check(doc, "replay")
    assert doc["status"] == "ok" and [t["warmup"] for t in doc["turns"]] == [True, False, False]
    assert doc["percentiles"]["ttft_ms"]["n"] == 2 and doc["metrics"]["generated_tokens"] == 16
    golden(json.dumps(mask(doc, c.root, timings=True), indent=2, sort_keys=True) + "\n", GOLDEN / "replay.json", UPDATE)

    rc, out, _ = run(["replay", "base", str(w), "-c", str(c.root), "--csv"], capsys)
    assert rc == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["turn_id"] for r in rows] == ["s1-0000", "s1-0001", "s1-0002"]
    assert [r["warmup"] for r in rows] == ["1", "0", "0"] and {r["start_id"] for r in rows} == {"2"}
    assert {r["start.generated_tokens"] for r in rows} == {"16.0"} and all(float(r["e2e_ms"]) > 0 for r in rows)
    assert all(r["generated_tokens"] == "8" for r in rows)
    gaps = [json.loads(r["chunk_gaps_ms"]) for r in rows]  # one cell of JSON text per turn
    assert all(0 < len(g) <= 7 and all(isinstance(x, float) and x >= 0 for x in g) for g in gaps), gaps

    rc, _, err = run(["replay", "base", str(w), "-c", str(c.root), "--csv", "--json"], capsys)
    assert rc == 2 and "--json or --csv, not both" in err
