"""The tamper matrix: a small real campaign (registry, starts run by the runner on command arms, starts with
turns through ``Store.insert_start``, a ledger step through ``ledger.adopt``, a stored refusal), copied per
case and edited with raw ``sqlite3`` as a careless colleague or a script gone wrong would. Each edit must make
``frank verify`` fail naming the record, and ``frank analyze`` / ``frank adopt`` refuse to act on it (exit 1,
nothing written); ``--force --why`` goes on and is itself recorded in the chain."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from frankenstein import chain, ledger
from frankenstein.campaign import open_campaign
from frankenstein.design.registry import register
from frankenstein.design.runner import run_design
from frankenstein.errors import DesignError, StoreError

from helpers_campaign import make_campaign, make_workload, write_design
from helpers_ledger import CONFIRMED
from helpers_cli import cli
from helpers_tamper import rewrite_chain_from, write_command_design


def store_design(camp, name: str, parts: str) -> str:
    """Register a recipe design and record every registered slot with turns (no engine), confirmed."""
    reg = register(camp, write_design(camp.root / f"{name}.toml", name=name, blocks=6, candidate_parts=parts))
    served, candidate = CONFIRMED
    for b, order in enumerate(reg.schedule):
        for pos, arm in enumerate(order):
            v = served[b] if arm == "served" else candidate[b]
            turns = [
                {
                    "idx": i,
                    "turn_id": f"s1-{i:04d}",
                    "warmup": i == 0,
                    "error": None,
                    "decode_ms": v * 15,
                    "target_steps": 15,
                    "generated_tokens": 16,
                }
                for i in range(3)
            ]
            camp.store.insert_start(
                design_id=reg.design_id,
                block=b,
                position=pos,
                arm=arm,
                status="ok",
                started_at=f"2025-03-01T10:{b:02d}:{pos:02d}.000Z",
                turns=turns,
                artifacts={"metrics_delta.json": json.dumps({"n_decode_total": 16}).encode()},
                episodes=[
                    {
                        "task_id": "t",
                        "draw": 0,
                        "task_hash": "h" * 8,
                        "status": "submitted",
                        "passed": arm == "candidate",
                        "turns": 2,
                    }
                ],
                metrics={"verify_step_ms": v, "tokens_per_step": 1.0},
                engine="llamacpp",
                engine_version="b6000 (test build)",
                resources={"gpu": None},
            )
    return reg.design_id


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tamper") / "camp"
    camp = make_campaign(root)
    make_workload(camp.root / "workloads" / "w.jsonl")
    kernel = register(camp, write_command_design(camp.root, "kernel", blocks=5, alpha=0.05))
    run_design(camp, kernel.design_id, echo=lambda s: None)  # kernel-1: 10 starts by the runner
    store_design(camp, "draft", '["draft"]')  # draft-1: 12 starts with turns
    ledger.adopt(camp, "draft", "draft-1")  # ledger step 1
    store_design(camp, "threads", '["threads1"]')  # threads-1: served = base + draft
    with pytest.raises(DesignError):
        register(camp, write_design(camp.root / "bad.toml", name="bad", extra='secondary = ["no_such_metric"]'))
    assert len(camp.store.refusals()) == 1  # refusal 1
    camp.close()
    return root


@pytest.fixture
def camp(template: Path, tmp_path: Path) -> Path:
    root = tmp_path / "camp"
    shutil.copytree(template, root)
    return root


@pytest.fixture
def sql(camp: Path) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(camp / "frank.db", isolation_level=None)
    conn.row_factory = sqlite3.Row
    yield conn
    conn.close()


def one(conn: sqlite3.Connection, q: str, *args: object) -> sqlite3.Row:
    return conn.execute(q, args).fetchone()


def start_of(conn: sqlite3.Connection, design: str, arm: str = "candidate", block: int = 2) -> int:
    return int(one(conn, "SELECT id FROM starts WHERE design_id = ? AND arm = ? AND block = ?", design, arm, block)[0])


def label(conn: sqlite3.Connection, start_id: int) -> str:
    return chain.label_of("start", one(conn, "SELECT * FROM starts WHERE id = ?", start_id))


def insert_start(conn: sqlite3.Connection, design: str, block: int, position: int, rep: int, arm: str) -> int:
    cur = conn.execute(
        "INSERT INTO starts (design_id, block, position, arm, rep, status, started_at, finished_at, "
        "metrics) VALUES (?,?,?,?,?,'ok','2025-03-02T00:00:00.000Z','2025-03-02T00:00:01.000Z',"
        "'{\"verify_step_ms\": 5.0}')",
        (design, block, position, arm, rep),
    )
    return int(cur.lastrowid or 0)


# ------------------------------------------------------------------ the cases: edit, then the message expected


def last_registry_row_deleted(c: sqlite3.Connection, root: Path) -> str:
    c.execute("DELETE FROM registry WHERE seq = 3")
    return "registry row 3 (threads-1): deleted after it was recorded"


def whole_chain_rewritten(c: sqlite3.Connection, root: Path) -> str:
    """Edit a start's value, then recompute its digest and every chain row after it with our own code."""
    sid = start_of(c, "threads-1")
    c.execute("UPDATE starts SET metrics = json_set(metrics, '$.verify_step_ms', 1.0) WHERE id = ?", (sid,))
    first = int(one(c, "SELECT seq FROM chain WHERE kind = 'start' AND ref = ?", sid)[0])
    rewrite_chain_from(c, first)
    return f"chain record {first} ({label(c, sid)}): does not match frank.head (the chain was rewritten)"


def start_value_edited(c: sqlite3.Connection, root: Path) -> str:
    sid = start_of(c, "threads-1")
    c.execute("UPDATE starts SET metrics = json_set(metrics, '$.verify_step_ms', 20.0) WHERE id = ?", (sid,))
    return f"{label(c, sid)}: changed after it was recorded"


def start_deleted(c: sqlite3.Connection, root: Path) -> str:
    sid = start_of(c, "threads-1")
    lab = label(c, sid)
    c.execute("DELETE FROM turns WHERE start_id = ?", (sid,))
    c.execute("DELETE FROM starts WHERE id = ?", (sid,))
    return f"{lab}: deleted after it was recorded"


def extra_blocks_inserted(c: sqlite3.Connection, root: Path) -> str:
    ids = [
        insert_start(c, "threads-1", b, pos, 0, arm) for b in (6, 7) for pos, arm in enumerate(("served", "candidate"))
    ]
    return (
        f"{label(c, ids[0])}: not in the chain (written outside frank); block 7, position 1 is not a slot the "
        "registration created (6 blocks of 2 starts)"
    )


def extra_repetitions_inserted(c: sqlite3.Connection, root: Path) -> str:
    arm = one(c, "SELECT arm FROM starts WHERE design_id = 'threads-1' AND block = 0 AND position = 0")[0]
    sid = insert_start(c, "threads-1", 0, 0, 1, arm)
    return (
        f"{label(c, sid)}: not in the chain (written outside frank); the registration put arm {arm} rep 0 in "
        f"this slot, not arm {arm} rep 1"
    )


def arm_labels_swapped(c: sqlite3.Connection, root: Path) -> str:
    c.execute(
        "UPDATE starts SET arm = CASE arm WHEN 'served' THEN 'candidate' ELSE 'served' END "
        "WHERE design_id = 'threads-1'"
    )
    sid = int(one(c, "SELECT MIN(id) FROM starts WHERE design_id = 'threads-1'")[0])
    return f"{label(c, sid)}: changed after it was recorded"


def turns_edited(c: sqlite3.Connection, root: Path) -> str:
    sid = start_of(c, "threads-1")
    c.execute("UPDATE turns SET metrics = json_set(metrics, '$.decode_ms', 1.0) WHERE start_id = ? AND idx = 1", (sid,))
    return f"{label(c, sid)}: changed after it was recorded"


def ledger_row_inserted(c: sqlite3.Connection, root: Path) -> str:
    c.execute(
        "INSERT INTO ledger (action, part, design_id, scope, forced, why, parts, at) VALUES "
        "('adopt', 'threads1', 'threads-1', '{}', 0, NULL, '[\"draft\", \"threads1\"]', '2025-03-03T00:00:00.000Z')"
    )
    return "ledger step 2 (adopt threads1): not in the chain (written outside frank)"


def refusals_deleted(c: sqlite3.Connection, root: Path) -> str:
    c.execute("DELETE FROM refusals")
    return "refusal 1 (registration bad): deleted after it was recorded"


def workload_edited(c: sqlite3.Connection, root: Path) -> str:
    # The copy's designs pin the template's workload by absolute path; this case registers its own design
    # on the copy's workload file first, then edits that file.
    with open_campaign(root) as camp:
        did = store_design(camp, "wl", '["threads1"]')
        path = camp.root.resolve() / "workloads" / "w.jsonl"
    path.write_text(path.read_text().replace("recorded", "edited"))
    return f"design {did}: workload {path} changed since registration"


def artifact_edited(c: sqlite3.Connection, root: Path) -> str:
    sid = start_of(c, "draft-1")
    c.execute("UPDATE artifacts SET data = ? WHERE start_id = ?", (b'{"n_decode_total": 99}', sid))
    return f"{label(c, sid)}: changed after it was recorded"


def episode_edited(c: sqlite3.Connection, root: Path) -> str:
    sid = start_of(c, "threads-1", arm="served")
    c.execute("UPDATE episodes SET passed = 1 WHERE start_id = ?", (sid,))
    return f"{label(c, sid)}: changed after it was recorded"


def revert_written_outside(c: sqlite3.Connection, root: Path) -> str:
    c.execute(
        "INSERT INTO ledger (action, part, design_id, scope, forced, why, parts, at) VALUES "
        "('revert', 'draft', 'draft-1', '{}', 0, NULL, '[]', '2025-03-03T00:00:00.000Z')"
    )
    return "ledger step 2 (revert draft): not in the chain (written outside frank)"


# the nine the registry chain already caught


def registry_schedule_edited(c: sqlite3.Connection, root: Path) -> str:
    row = one(c, "SELECT schedule FROM registry WHERE seq = 1")
    flipped = json.dumps([list(reversed(o)) for o in json.loads(row[0])], separators=(",", ":"))
    c.execute("UPDATE registry SET schedule = ? WHERE seq = 1", (flipped,))
    return "registry row 1 (kernel-1): the row was changed after registration"


def registry_seed_edited(c: sqlite3.Connection, root: Path) -> str:
    c.execute("UPDATE registry SET seed = '0123456789abcdef' WHERE seq = 2")
    return "registry row 2 (draft-1): the row was changed after registration"


def registry_time_edited(c: sqlite3.Connection, root: Path) -> str:
    c.execute("UPDATE registry SET registered_at = '2020-01-01T00:00:00.000Z' WHERE seq = 1")
    return "registry row 1 (kernel-1): the row was changed after registration"


def registry_design_edited(c: sqlite3.Connection, root: Path) -> str:
    c.execute("UPDATE registry SET canonical = replace(canonical, '\"blocks\":6', '\"blocks\":9') WHERE seq = 3")
    return "registry row 3 (threads-1): the stored design does not match its hash"


def registry_hash_recomputed(c: sqlite3.Connection, root: Path) -> str:
    row = one(c, "SELECT canonical FROM registry WHERE seq = 3")
    text = row[0].replace('"blocks":6', '"blocks":9')
    c.execute("UPDATE registry SET canonical = ?, design_hash = ? WHERE seq = 3", (text, chain.sha256(text)))
    return "registry row 3 (threads-1): the row was changed after registration"


def registry_middle_row_deleted(c: sqlite3.Connection, root: Path) -> str:
    c.execute("DELETE FROM registry WHERE seq = 2")
    return "registry row 3 (threads-1): the chain is broken"


def registry_prev_hash_edited(c: sqlite3.Connection, root: Path) -> str:
    c.execute("UPDATE registry SET prev_hash = ? WHERE seq = 2", ("f" * 64,))
    return "registry row 2 (draft-1): the chain is broken"


def design_file_edited(c: sqlite3.Connection, root: Path) -> str:
    copy = root / "designs" / "draft-1.toml"
    copy.write_text(copy.read_text().replace("blocks = 6", "blocks = 60"))
    return "draft-1.toml: the registered design file was changed or removed after registration"


def design_file_removed(c: sqlite3.Connection, root: Path) -> str:
    (root / "designs" / "kernel-1.toml").unlink()
    return "kernel-1.toml: the registered design file was changed or removed after registration"


# more ways in


def last_start_and_its_chain_row_deleted(c: sqlite3.Connection, root: Path) -> str:
    ref, seq = one(c, "SELECT ref, seq FROM chain WHERE kind = 'start' ORDER BY seq DESC LIMIT 1")
    c.execute("DELETE FROM chain WHERE seq >= ?", (seq,))
    c.execute("DELETE FROM turns WHERE start_id = ?", (ref,))
    c.execute("DELETE FROM starts WHERE id = ?", (ref,))
    c.execute("DELETE FROM refusals")
    return f"frank.head: chain record {seq} was appended but is not in the store"


def head_file_removed(c: sqlite3.Connection, root: Path) -> str:
    (root / "frank.head").unlink()
    return "frank.head is missing"


def head_file_line_garbled(c: sqlite3.Connection, root: Path) -> str:
    head = root / "frank.head"
    lines = head.read_text().splitlines()
    lines[2] = "3 not-a-hash"
    head.write_text("\n".join(lines) + "\n")
    return "frank.head line 3 is not 'SEQ HASH' ('3 not-a-hash'): the head file was edited"


def ledger_step_edited(c: sqlite3.Connection, root: Path) -> str:
    c.execute("UPDATE ledger SET forced = 1, why = 'later' WHERE seq = 1")
    return "ledger step 1 (adopt draft): changed after it was recorded"


def chain_row_edited(c: sqlite3.Connection, root: Path) -> str:
    c.execute("UPDATE chain SET label = 'start 1 (nothing to see)' WHERE seq = 2")
    lab = one(c, "SELECT label FROM chain WHERE seq = 2")[0]
    return f"chain record 2 ({lab}): the chain row was changed"


def orphan_turns_inserted(c: sqlite3.Connection, root: Path) -> str:
    c.execute("INSERT INTO turns (start_id, idx, turn_id, warmup, metrics) VALUES (999, 0, 't', 0, '{}')")
    return "turns of start 999: that start is not recorded"


def start_of_an_unregistered_design_inserted(c: sqlite3.Connection, root: Path) -> str:
    sid = insert_start(c, "ghost-9", 0, 0, 0, "candidate")
    return f"{label(c, sid)}: not in the chain (written outside frank)"


CASES: list[Callable[[sqlite3.Connection, Path], str]] = [
    last_registry_row_deleted,
    whole_chain_rewritten,
    start_value_edited,
    start_deleted,
    extra_blocks_inserted,
    extra_repetitions_inserted,
    arm_labels_swapped,
    turns_edited,
    ledger_row_inserted,
    refusals_deleted,
    workload_edited,
    registry_schedule_edited,
    registry_seed_edited,
    registry_time_edited,
    registry_design_edited,
    registry_hash_recomputed,
    registry_middle_row_deleted,
    registry_prev_hash_edited,
    design_file_edited,
    design_file_removed,
    last_start_and_its_chain_row_deleted,
    head_file_removed,
    head_file_line_garbled,
    ledger_step_edited,
    chain_row_edited,
    orphan_turns_inserted,
    start_of_an_unregistered_design_inserted,
    artifact_edited,
    episode_edited,
    revert_written_outside,
]


def counts(root: Path) -> tuple[int, ...]:
    conn = sqlite3.connect(root / "frank.db")
    try:
        return tuple(
            conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
            for t in ("registry", "starts", "ledger", "refusals", "overrides", "chain")
        )
    finally:
        conn.close()


def test_the_untouched_campaign_verifies_and_is_acted_on(camp: Path, capsys) -> None:
    code, out, err = cli(capsys, "verify", "-c", str(camp))
    assert code == 0, err
    assert "registry verified: 3 designs" in out and "evidence chain verified: 39 records, head " in out
    assert cli(capsys, "analyze", "threads-1", "-c", str(camp))[0] == 0
    code, out, err = cli(capsys, "adopt", "threads1", "--design", "threads-1", "-c", str(camp))
    assert code == 0, err
    assert out.startswith("step 2: adopted threads1 on design threads-1")
    assert cli(capsys, "verify", "-c", str(camp))[0] == 0


@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
def test_tampering_is_detected_and_refused(case, camp: Path, sql: sqlite3.Connection, capsys) -> None:
    expected = case(sql, camp)
    sql.close()
    code, out, err = cli(capsys, "verify", "-c", str(camp))
    assert code == 1 and err.startswith("frank: error: ") and expected in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    before = counts(camp)
    for args in (("analyze", "threads-1"), ("adopt", "threads1", "--design", "threads-1")):
        code, out, err = cli(capsys, *args, "-c", str(camp))
        assert code == 1 and expected in err and "refuses to work from a campaign that fails verification" in err, err
        assert out == ""
    assert counts(camp) == before  # a refusal to act writes nothing


def test_a_deleted_start_is_never_rerun_by_resume(camp: Path, sql: sqlite3.Connection, capsys) -> None:
    sid = start_of(sql, "kernel-1", block=3)
    lab = label(sql, sid)
    sql.execute("DELETE FROM starts WHERE id = ?", (sid,))
    sql.close()
    before = counts(camp)
    code, out, err = cli(capsys, "run", "kernel-1", "--resume", "-c", str(camp))
    assert code == 1 and f"{lab}: deleted after it was recorded" in err and "; run --resume refuses" in err, err
    assert counts(camp) == before


def test_revert_refuses_too(camp: Path, sql: sqlite3.Connection, capsys) -> None:
    expected = ledger_step_edited(sql, camp)
    sql.close()
    before = counts(camp)
    code, _, err = cli(capsys, "revert", "-c", str(camp))
    assert code == 1 and expected in err and "revert refuses" in err
    assert counts(camp) == before
    code, out, err = cli(capsys, "revert", "--force", "--why", "undo the edited step", "-c", str(camp))
    assert code == 0 and out.startswith("step 2: undid step 1"), err


def test_report_refuses_too(camp: Path, sql: sqlite3.Connection, capsys, tmp_path: Path) -> None:
    expected = refusals_deleted(sql, camp)
    sql.close()
    code, _, err = cli(capsys, "report", "--out", str(tmp_path / "note"), "-c", str(camp))
    assert code == 1 and expected in err and not (tmp_path / "note").exists()


def test_serve_refuses_a_ledger_row_written_outside_frank(camp: Path, sql: sqlite3.Connection, capsys) -> None:
    """A hand-inserted ledger step would change what `frank serve` serves: serve verifies before it starts anything."""
    expected = ledger_row_inserted(sql, camp)
    sql.close()
    code, _, err = cli(capsys, "serve", "--listen", "127.0.0.1:0", "-c", str(camp))
    assert code == 1 and expected in err and "serve refuses to work from a campaign that fails verification" in err


def test_force_with_why_goes_on_and_is_recorded_in_the_chain(camp: Path, sql: sqlite3.Connection, capsys) -> None:
    expected = start_value_edited(sql, camp)
    sql.close()
    code, _, err = cli(capsys, "analyze", "threads-1", "--force", "-c", str(camp))
    assert code == 1 and "--force needs --why TEXT: a forced analyze is recorded with its reason" in err
    code, out, err = cli(capsys, "analyze", "threads-1", "--force", "--why", "looking at it", "-c", str(camp))
    assert code == 0, err
    with open_campaign(camp) as c:
        [o] = c.store.overrides()
        assert (o.command, o.why) == ("analyze", "looking at it") and expected in o.problem
        assert c.store.chain_head().label == "override 1 (analyze: looking at it)"
    code, _, err = cli(capsys, "verify", "-c", str(camp))
    assert code == 1 and expected in err  # forcing never makes the tampering go away


def test_a_start_outside_the_registered_slots_is_refused_at_insert(camp: Path) -> None:
    with open_campaign(camp) as c:
        reg = register(c, write_design(c.root / "fresh.toml", name="fresh", blocks=5))
        before = counts(camp)
        first = reg.schedule[0][0]
        other = "candidate" if first == "served" else "served"
        for block, pos, rep, arm, why in (
            (5, 0, 0, first, "block 6, position 1 is not a slot the registration created (5 blocks of 2 starts)"),
            (0, 2, 0, first, "block 1, position 3 is not a slot"),
            (0, 0, 1, first, f"the registration put arm {first} rep 0 in this slot, not arm {first} rep 1"),
            (0, 0, 0, other, f"the registration put arm {first} rep 0 in this slot, not arm {other} rep 0"),
        ):
            with pytest.raises(StoreError) as e:
                c.store.insert_start(
                    design_id=reg.design_id,
                    block=block,
                    position=pos,
                    rep=rep,
                    arm=arm,
                    status="ok",
                    started_at="2025-03-02T00:00:00.000Z",
                    metrics={},
                )
            assert str(e.value).startswith(
                f"start refused: design {reg.design_id}, block {block + 1}, "
            ) and why in str(e.value)
        assert counts(camp) == before
        assert c.store.verify() == before[-1]


def test_a_store_written_before_the_chain_is_sealed_when_opened(camp: Path) -> None:
    """A format-2 store (no chain table): its records are chained on first open, and protected from then on."""
    conn = sqlite3.connect(camp / "frank.db")
    conn.executescript(
        "DROP TABLE chain; DROP TABLE overrides; DELETE FROM migrations WHERE name = '0004_chain';"
        "UPDATE meta SET value = '2' WHERE key = 'format_version';"
    )
    conn.close()
    (camp / "frank.head").unlink()
    with open_campaign(camp) as c:
        assert c.store.verify() == 39 and len(chain.read_head(c.store.head_path) or []) == 39
        assert c.store.query("SELECT value FROM meta WHERE key = 'format_version'")[0][0] == "3"
        c.store.conn.execute("UPDATE starts SET status = 'failed' WHERE id = 1")
        with pytest.raises(StoreError, match=r"start 1 \(design kernel-1, .*\): changed after it was recorded"):
            c.store.verify()


def test_a_forced_analyze_warns_on_stderr_naming_the_broken_record(camp: Path, sql: sqlite3.Connection, capsys) -> None:
    """Issue #14: `analyze --force --why` past a failed verification says so before the verdict."""
    expected = start_value_edited(sql, camp)
    sql.close()
    code, out, err = cli(capsys, "analyze", "threads-1", "--force", "--why", "testing", "-c", str(camp))
    assert code == 0, err
    [line] = [x for x in err.splitlines() if x.startswith("warning: ")]
    assert line.startswith(f"warning: verification failed ({expected}")
    assert line.endswith("); going on because --force --why 'testing' (recorded as override 1)")
    assert "verdict" in out
    code, out, err = cli(capsys, "analyze", "threads-1", "--force", "--why", "again", "-c", str(camp))
    assert code == 0 and "(recorded as override 2)" in err


def test_an_untouched_campaign_prints_no_warning(camp: Path, capsys) -> None:
    code, _, err = cli(capsys, "analyze", "threads-1", "--force", "--why", "nothing wrong", "-c", str(camp))
    assert code == 0 and "warning:" not in err
    with open_campaign(camp) as c:
        assert c.store.overrides() == []


def test_a_forced_report_lists_every_override_with_its_why_and_the_broken_record(
    camp: Path, sql: sqlite3.Connection, capsys, tmp_path: Path
) -> None:
    """Issue #14: the note names the failed verification at the top, lists every override, and a forced
    adopt's step says that it overrode a failed verification instead of 'nothing'."""
    expected = start_value_edited(sql, camp)
    sql.close()
    code, out, err = cli(capsys, "adopt", "threads1", "--design", "threads-1", "--force", "--why", "x", "-c", str(camp))
    assert code == 0 and out.startswith("step 2: adopted threads1 on design threads-1 (FORCED)"), err
    assert f"warning: verification failed ({expected}" in err and "--why 'x' (recorded as override 1)" in err
    code, out, err = cli(capsys, "report", "--out", str(tmp_path / "note"), "--force", "--why", "y", "-c", str(camp))
    assert code == 0, err
    assert "--why 'y' (recorded as override 2)" in err
    note = (tmp_path / "note" / "note.md").read_text()
    head = note.split("## Summary")[0]
    assert f"**Warning: this campaign fails verification** ({expected}" in head
    assert "under `--force --why` 'y' (override 2)" in head
    section = note.split("## Verification overridden")[1].split("## Credits")[0]
    rows = [r for r in section.splitlines() if r.startswith("| 1 ") or r.startswith("| 2 ")]
    assert len(rows) == 2
    assert rows[0].startswith("| 1 | `adopt` | x | ") and expected in rows[0]
    assert rows[1].startswith("| 2 | `report` | y | ") and expected in rows[1]
    [step] = [x for x in note.splitlines() if "(step 2, design `threads-1`)" in x]
    overrode = step.split("forced because: x; it overrode: ")[1]
    assert f"a failed verification ({expected}" in overrode and overrode.endswith("; override 1).")
