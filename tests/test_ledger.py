"""The ledger on real store rows (registry + insert_start, no engine): adopt only on a confirmed verdict
whose gates passed, every refusal with its message, force with a reason, revert one exact step."""

from __future__ import annotations

from pathlib import Path

import pytest

from frankenstein import ledger
from frankenstein.campaign import open_campaign
from frankenstein.design.registry import register
from frankenstein.errors import LedgerError

from helpers_campaign import TOML, make_campaign, make_workload, write_design
from helpers_ledger import CONFIRMED, MIXED, gpu, stored_design


@pytest.fixture
def camp(tmp_path: Path):
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl")
    yield c
    c.close()


def test_empty_ledger_serves_the_base_recipe(camp) -> None:
    assert ledger.served_parts(camp) == [] and ledger.history(camp) == []
    r = ledger.served_recipe(camp)
    assert r.name == "served" and r.args == camp.recipe("base").args and r.parts == []


def test_adopt_confirmed_records_scope_and_serves_the_part(camp) -> None:
    reg = stored_design(camp, name="draft-speed", served=CONFIRMED[0], candidate=CONFIRMED[1])
    e = ledger.adopt(camp, "draft", reg.design_id)
    assert (e.seq, e.action, e.part, e.design_id, e.forced, e.parts) == (
        1,
        "adopt",
        "draft",
        "draft-speed-1",
        False,
        ["draft"],
    )
    s = e.scope
    assert (s["concurrency"], s["kind"], s["design_id"], s["verdict"], s["p"]) == (
        1,
        "speed",
        "draft-speed-1",
        "confirmed",
        "1/64",
    )
    assert s["workload_path"] == str(camp.root / "workloads" / "w.jsonl") and len(s["workload_hash"]) == 64
    assert s["engine_version"] == "b6000 (test build)" and s["in_favour"] == 6 and s["blocks"] == 6
    assert ledger.served_parts(camp) == ["draft"] and ledger.history(camp) == [e]
    assert ledger.served_recipe(camp).args == camp.recipe("base", ["draft"]).args
    # `frank run` uses the served recipe: a design registered now freezes served = base + draft.
    later = register(camp, write_design(camp.root / "next.toml", name="next", blocks=5, candidate_parts='["threads1"]'))
    assert later.frozen.recipes["served"].parts == ["draft"]
    assert later.frozen.recipes["candidate"].parts == ["draft", "threads1"]


def test_refuses_a_design_that_is_not_confirmed_and_keeps_the_refusal(camp) -> None:
    reg = stored_design(camp, name="mixed", served=MIXED[0], candidate=MIXED[1])
    with pytest.raises(LedgerError) as e:
        ledger.adopt(camp, "draft", reg.design_id)
    assert str(e.value) == (
        "refused: adopt 'draft' on design mixed-1: its verdict is 'not confirmed', not 'confirmed' (p > alpha = 0.05)"
    )
    assert ledger.history(camp) == [] and ledger.served_parts(camp) == []
    [r] = camp.store.refusals()
    assert (r.what, r.name, r.part) == ("adopt", "mixed-1", "draft") and r.reason.startswith(
        "its verdict is 'not confirmed'"
    )


def test_refuses_when_not_every_block_was_run(camp) -> None:
    reg = stored_design(camp, name="short", blocks=8, served=CONFIRMED[0], candidate=CONFIRMED[1])
    with pytest.raises(LedgerError) as e:
        ledger.adopt(camp, "draft", reg.design_id)
    assert str(e.value) == (
        "refused: adopt 'draft' on design short-1: 6 of 8 blocks were run (incomplete); "
        "adopt needs every registered block"
    )


def test_refuses_an_invalid_verdict_with_its_reason(camp) -> None:
    reg = stored_design(
        camp,
        name="inv",
        served=CONFIRMED[0],
        candidate=CONFIRMED[1],
        extra='failure_policy = "invalidate"',
        fail=lambda arm, b: "engine died" if (arm, b) == ("candidate", 2) else None,
    )
    with pytest.raises(LedgerError) as e:
        ledger.adopt(camp, "draft", reg.design_id)
    assert str(e.value) == (
        "refused: adopt 'draft' on design inv-1: its verdict is 'invalid', not 'confirmed' "
        "(1 failed start(s) and the failure policy is 'invalidate')"
    )


def test_refuses_a_design_that_tested_another_part(camp) -> None:
    reg = stored_design(camp, name="t1", parts='["threads1"]', served=CONFIRMED[0], candidate=CONFIRMED[1])
    with pytest.raises(LedgerError) as e:
        ledger.adopt(camp, "draft", reg.design_id)
    assert str(e.value) == "design t1-1 did not test served + draft: its candidate arm is served + threads1"
    assert camp.store.refusals() == []  # a mistaken request, not evidence: not kept


def test_refuses_when_the_served_recipe_changed_since_registration(camp) -> None:
    a = stored_design(camp, name="a", served=CONFIRMED[0], candidate=CONFIRMED[1])
    b = stored_design(camp, name="b", parts='["threads1"]', served=CONFIRMED[0], candidate=CONFIRMED[1])
    ledger.adopt(camp, "draft", a.design_id)
    with pytest.raises(LedgerError) as e:
        ledger.adopt(camp, "threads1", b.design_id)
    assert str(e.value) == (
        "refused: adopt 'threads1' on design b-1: it was registered when the served recipe was base, "
        "and it is now base + draft: register the design again"
    )
    assert ledger.served_parts(camp) == ["draft"]


def test_refuses_when_frank_toml_changed_the_part_since_registration(camp, tmp_path: Path) -> None:
    reg = stored_design(camp, name="d", served=CONFIRMED[0], candidate=CONFIRMED[1])
    (camp.root / "frank.toml").write_text(TOML.replace('"--spec-draft-n-max", "8"', '"--spec-draft-n-max", "16"'))
    with open_campaign(camp.root) as c2:
        with pytest.raises(LedgerError) as e:
            ledger.adopt(c2, "draft", reg.design_id)
    assert str(e.value) == (
        "refused: adopt 'draft' on design d-1: frank.toml changed since d-1 was registered: "
        "its candidate arm's args differ from what the recipe resolves to now"
    )


def test_memory_gate_failed_is_refused(camp) -> None:
    res = lambda arm, b: gpu(1000.0 if arm == "served" else 1500.0 + b, 300.0)  # noqa: E731
    reg = stored_design(
        camp, name="mem", served=CONFIRMED[0], candidate=CONFIRMED[1], extra="[gates]\nmemory_mib = 100", resources=res
    )
    with pytest.raises(LedgerError) as e:
        ledger.adopt(camp, "draft", reg.design_id)
    assert str(e.value) == (
        "refused: adopt 'draft' on design mem-1: memory gate failed: the largest increase of peak "
        "GPU memory is +505 MiB (GPU 0), over the 100 MiB allowed"
    )


def test_memory_gate_passed_is_recorded_in_the_scope(camp) -> None:
    res = lambda arm, b: gpu(1000.0 if arm == "served" else 1040.0, 300.0)  # noqa: E731
    reg = stored_design(
        camp, name="mem", served=CONFIRMED[0], candidate=CONFIRMED[1], extra="[gates]\nmemory_mib = 100", resources=res
    )
    e = ledger.adopt(camp, "draft", reg.design_id)
    assert e.scope["memory_gate"] == (
        "memory gate passed: the largest increase of peak GPU memory is +40 MiB (GPU 0), within the 100 MiB allowed"
    )


def test_memory_gate_without_a_gpu_is_refused_unless_forced(camp) -> None:
    reg = stored_design(
        camp, name="nogpu", served=CONFIRMED[0], candidate=CONFIRMED[1], extra="[gates]\nmemory_mib = 100"
    )
    with pytest.raises(LedgerError) as e:
        ledger.adopt(camp, "draft", reg.design_id)
    msg = "memory gate not checked: no GPU (resources absent in all 12 ok starts)"
    assert str(e.value) == f"refused: adopt 'draft' on design nogpu-1: {msg}"
    f = ledger.adopt(camp, "draft", reg.design_id, force=True, why="CPU-only box; memory checked by hand")
    assert f.forced and f.why == "CPU-only box; memory checked by hand" and f.scope["overridden"] == [msg]
    assert ledger.served_parts(camp) == ["draft"]


def test_force_needs_a_reason(camp) -> None:
    reg = stored_design(camp, name="mixed", served=MIXED[0], candidate=MIXED[1])
    with pytest.raises(LedgerError) as e:
        ledger.adopt(camp, "draft", reg.design_id, force=True, why="  ")
    assert str(e.value) == "--force needs --why TEXT: a forced adoption is recorded with its reason"
    f = ledger.adopt(camp, "draft", reg.design_id, force=True, why="the vendor's own numbers")
    assert f.forced and f.scope["verdict"] == "not confirmed"
    assert f.scope["overridden"] == ["its verdict is 'not confirmed', not 'confirmed' (p > alpha = 0.05)"]


def test_fidelity_gate_naming_a_missing_design_is_refused(camp) -> None:
    reg = stored_design(
        camp, name="fg", served=CONFIRMED[0], candidate=CONFIRMED[1], extra='[gates]\nfidelity = "fid-9"'
    )
    with pytest.raises(LedgerError) as e:
        ledger.adopt(camp, "draft", reg.design_id)
    assert str(e.value).startswith(
        "refused: adopt 'draft' on design fg-1: fidelity gate fid-9: no registered design 'fid-9'"
    )


def test_request_refusals(camp) -> None:
    reg = stored_design(camp, name="d", served=CONFIRMED[0], candidate=CONFIRMED[1])
    with pytest.raises(LedgerError, match=r"^PART: unknown part 'drfat' \(parts in frank.toml: draft, threads1\)$"):
        ledger.adopt(camp, "drfat", reg.design_id)
    with pytest.raises(
        LedgerError, match=r"^cannot adopt on design nope-7: no registered design 'nope-7' \(registered: d-1\)$"
    ):
        ledger.adopt(camp, "draft", "nope-7")
    ledger.adopt(camp, "draft", reg.design_id)
    with pytest.raises(LedgerError, match=r"^part 'draft' is already served \(base \+ draft\)$"):
        ledger.adopt(camp, "draft", reg.design_id)


def test_refuses_designs_of_kinds_that_cannot_admit_a_part(camp) -> None:
    reg = register(camp, write_design(camp.root / "aa.toml", name="aa", kind="aa", blocks=5, candidate_parts="[]"))
    with pytest.raises(LedgerError) as e:
        ledger.adopt(camp, "draft", reg.design_id)
    assert str(e.value) == (
        "design aa-1 is a aa design; a part is adopted on a speed design (fidelity and memory are "
        "its gates, an agent design guards against harm)"
    )


def test_a_step_written_meanwhile_refuses_the_stale_one(camp) -> None:
    reg = stored_design(camp, name="d", served=CONFIRMED[0], candidate=CONFIRMED[1])
    ledger.adopt(camp, "draft", reg.design_id)
    with pytest.raises(LedgerError, match=r"^the ledger changed while this step was being checked"):
        ledger._append(
            camp,
            None,
            action="adopt",
            part="threads1",
            design_id=None,
            scope={},
            forced=False,
            why=None,
            parts=["threads1"],
        )
    assert len(ledger.history(camp)) == 1


def test_revert_undoes_exactly_the_last_step(camp) -> None:
    with pytest.raises(LedgerError, match=r"^nothing to revert: the ledger is empty \(served: base\)$"):
        ledger.revert(camp)
    a = stored_design(camp, name="a", served=CONFIRMED[0], candidate=CONFIRMED[1])
    ledger.adopt(camp, "draft", a.design_id)
    after_a = ledger.served_recipe(camp)
    b = stored_design(camp, name="b", parts='["threads1"]', served=CONFIRMED[0], candidate=CONFIRMED[1], day=2)
    ledger.adopt(camp, "threads1", b.design_id)
    assert ledger.served_parts(camp) == ["draft", "threads1"]
    r = ledger.revert(camp, why="slower at concurrency 4")
    assert (r.action, r.part, r.design_id, r.parts, r.why) == (
        "revert",
        "threads1",
        "b-1",
        ["draft"],
        "slower at concurrency 4",
    )
    frozen_a = ledger.history(camp)[0].scope["served_recipe"]
    assert r.scope == {
        "undoes": 2,
        "undoes_action": "adopt",
        "parts_before": ["draft", "threads1"],
        "served_recipe": frozen_a,  # the recipe step 1 froze is served again
    }
    assert ledger.served_recipe(camp) == after_a  # exactly the previous recipe
    rr = ledger.revert(camp)  # a revert of a revert re-applies
    assert (rr.part, rr.parts, rr.scope["undoes_action"]) == ("threads1", ["draft", "threads1"], "revert")
    assert [e.action for e in ledger.history(camp)] == ["adopt", "adopt", "revert", "revert"]


def test_served_lines_show_recipe_and_history(camp) -> None:
    reg = stored_design(camp, name="d", served=CONFIRMED[0], candidate=CONFIRMED[1])
    e = ledger.adopt(camp, "draft", reg.design_id)
    lines = ledger.format_served(camp)
    assert lines[0] == "served: base + draft"
    assert lines[3].startswith("  args: --ctx-size 2048 --threads 1 --parallel 1 --seed 1 -md ")
    assert lines[4] == "  recipe: frozen at ledger step 1 (adopt draft on design d-1)"
    h = lines.index("history:")
    assert all(x.startswith("  pin: ") for x in lines[5 : h - 1])  # the files registration pinned, then a blank
    assert lines[h + 1] == f"    1  {e.at}  adopt draft  design d-1  → [draft]"
    assert lines[h + 2].startswith("       scope: concurrency=1, workload_hash=") and lines[h + 2].endswith(
        ", engine_version=b6000 (test build), kind=speed, verdict=confirmed, p=1/64"
    )
