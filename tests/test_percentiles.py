"""Per-arm latency percentiles from stored per-turn rows: numpy's default definition (negative values
too), the TPOT formula, ITL as pooled chunk gaps, pre_ms/post_ms, and which turns count (measured turns of
ok starts only); registration refuses post_ms as the primary metric of a ratio rule (the real CLI)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from frankenstein.campaign import open_campaign
from frankenstein.design.analysis import analyze, format_analysis
from frankenstein.design.kinds.base import settled
from frankenstein.design.percentiles import arm_percentiles, percentile, rows_percentiles, turn_gaps, turn_values
from frankenstein.design.registry import get, register
from frankenstein.report.note import write_report

from helpers_campaign import make_campaign, make_workload, write_design
from helpers_cli import cli


def test_percentile_is_numpys_linear_interpolation() -> None:
    rng = random.Random(18)
    for n in (1, 2, 3, 7, 100, 101):
        xs = [rng.lognormvariate(3, 1) for _ in range(n)]
        for q in (0.0, 0.5, 0.9, 0.99, 1.0):
            assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q * 100)), rel=1e-12)
    assert percentile([10.0, 20.0], 0.9) == pytest.approx(19.0)
    with pytest.raises(ValueError):
        percentile([], 0.5)
    with pytest.raises(ValueError):
        percentile([1.0], 99)  # a percent passed for a fraction


def test_percentile_of_negative_and_mixed_values_is_numpys() -> None:
    """post_ms is often negative with llama.cpp: the same definition, nothing clipped or shifted."""
    rng = random.Random(3)
    for n in (1, 2, 5, 64):
        xs = [rng.uniform(-6.0, 2.0) for _ in range(n)]
        for q in (0.0, 0.5, 0.9, 0.99, 1.0):
            assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q * 100, method="linear")), rel=1e-12)
    assert percentile([-4.0, -2.0], 0.5) == pytest.approx(-3.0)
    assert percentile([-1.0, -3.0, 5.0], 0.9) == pytest.approx(3.8)  # sorted -3, -1, 5: h = 1.8


def test_tpot_is_the_client_decode_time_over_tokens_after_the_first() -> None:
    assert turn_values({"ttft_ms": 50.0, "e2e_ms": 150.0, "generated_tokens": 11}) == {
        "ttft_ms": 50.0,
        "e2e_ms": 150.0,
        "tpot_ms": 10.0,
    }
    assert "tpot_ms" not in turn_values({"ttft_ms": 50.0, "e2e_ms": 60.0, "generated_tokens": 1})
    assert turn_values({"ttft_ms": None, "e2e_ms": 60.0, "generated_tokens": 8}) == {"e2e_ms": 60.0}  # not streamed
    assert turn_values({"ttft_ms": float("nan"), "e2e_ms": True, "generated_tokens": 8}) == {}
    assert turn_values({"pre_ms": 18.5, "post_ms": -4.25}) == {"pre_ms": 18.5, "post_ms": -4.25}
    assert "itl_ms" not in turn_values({"chunk_gaps_ms": [1.0, 2.0]})  # ITL is pooled gaps, never per turn


def test_turn_gaps_reads_only_a_list_of_finite_numbers() -> None:
    assert turn_gaps({"chunk_gaps_ms": [1.5, 0.0, 2.25]}) == [1.5, 0.0, 2.25]
    assert turn_gaps({}) == [] and turn_gaps({"chunk_gaps_ms": None}) == []  # not streamed / stored before
    assert turn_gaps({"chunk_gaps_ms": 3.0}) == []
    assert turn_gaps({"chunk_gaps_ms": [1.0, float("nan"), True, "2", 4.0]}) == [1.0, 4.0]


def test_itl_pools_every_gap_of_measured_turns_and_post_ms_keeps_its_sign() -> None:
    rows = [
        {"idx": 0, "warmup": 1, "chunk_gaps_ms": [900.0] * 5, "post_ms": 900.0},  # warm-up: not measured
        {
            "idx": 1,
            "warmup": 0,
            "ttft_ms": 40.0,
            "e2e_ms": 46.0,
            "generated_tokens": 4,
            "chunk_gaps_ms": [1.0, 2.0, 3.0],
        },
        {"idx": 2, "warmup": 0, "ttft_ms": 30.0, "e2e_ms": 40.0, "generated_tokens": 2, "chunk_gaps_ms": [10.0]},
        {"idx": 3, "warmup": 0, "error": "turn t3: 400", "chunk_gaps_ms": [500.0], "post_ms": 500.0},
        {"idx": 4, "warmup": 0, "ttft_ms": 20.0, "e2e_ms": 21.0, "generated_tokens": 1, "chunk_gaps_ms": []},
    ]
    rows[1].update(pre_ms=12.0, post_ms=-4.0)
    rows[2].update(pre_ms=14.0, post_ms=-1.0)
    rows[4].update(pre_ms=16.0, post_ms=0.5)
    got = rows_percentiles(rows)
    assert list(got) == ["ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "pre_ms", "post_ms"]
    gaps = [1.0, 2.0, 3.0, 10.0]
    assert got["itl_ms"]["n"] == 4  # gaps, not turns
    for name, q in (("p50", 50), ("p90", 90), ("p99", 99)):
        assert got["itl_ms"][name] == pytest.approx(float(np.percentile(gaps, q, method="linear")))
        assert got["post_ms"][name] == pytest.approx(float(np.percentile([-4.0, -1.0, 0.5], q, method="linear")))
    assert got["itl_ms"]["p50"] == pytest.approx(2.5)
    # the per-turn mean weighs each turn once: (6/3, 10/1); the pooled gaps weigh each gap once
    assert (got["tpot_ms"]["n"], got["tpot_ms"]["p50"]) == (2, pytest.approx(6.0))
    assert got["post_ms"] == {"n": 3, "p50": -1.0, "p90": pytest.approx(0.2), "p99": pytest.approx(0.47)}
    assert got["pre_ms"]["n"] == 3 and got["pre_ms"]["p50"] == 14.0
    assert "itl_ms" not in rows_percentiles([{"idx": 0, "warmup": 0, "ttft_ms": 5.0, "chunk_gaps_ms": []}])


def test_only_measured_turns_of_ok_starts_count(tmp_path) -> None:
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl")
    reg = register(c, write_design(c.root / "d.toml", blocks=5))

    def turns(base: float) -> list[dict]:
        rows = [
            {
                "idx": i,
                "turn_id": f"t{i}",
                "warmup": 0,
                "ttft_ms": base + i,
                "e2e_ms": base * 10,
                "generated_tokens": 9,
                "chunk_gaps_ms": [base / 10 + i, base / 5],
                "post_ms": -base / 100 - i,
            }
            for i in range(4)
        ]
        rows[0]["warmup"] = 1  # warm-up: not measured
        rows[0]["ttft_ms"] = 1e6
        rows[0]["chunk_gaps_ms"] = [1e6]
        rows.append(
            {"idx": 4, "turn_id": "t4", "warmup": 0, "error": "turn t4: 400", "ttft_ms": 1e6, "chunk_gaps_ms": [1e6]}
        )
        return rows

    for b in range(2):
        for pos, arm in enumerate(reg.schedule[b]):
            failed = (b, arm) == (1, "candidate")
            c.store.insert_start(
                design_id=reg.design_id,
                block=b,
                position=pos,
                arm=arm,
                status="failed" if failed else "ok",
                started_at="2025-01-01T00:00:00Z",
                metrics={"verify_step_ms": 1.0},
                turns=turns(1e5 if failed else 100.0 if arm == "served" else 50.0),
            )
    got = arm_percentiles(c.store, c.store.starts_of(reg.design_id))
    assert list(got) == ["served", "candidate"]
    assert got["served"]["ttft_ms"] == {"n": 6, "p50": 102.0, "p90": 103.0, "p99": 103.0}
    assert got["candidate"]["ttft_ms"]["n"] == 3 and got["candidate"]["ttft_ms"]["p99"] == pytest.approx(52.98)
    assert got["candidate"]["tpot_ms"]["p50"] == pytest.approx((500.0 - 52.0) / 8)
    served_gaps = [g for _ in range(2) for i in (1, 2, 3) for g in (10.0 + i, 20.0)]
    assert got["served"]["itl_ms"]["n"] == 12  # 2 ok starts x 3 measured turns x 2 gaps
    assert got["served"]["itl_ms"]["p90"] == pytest.approx(float(np.percentile(served_gaps, 90)))
    assert got["served"]["post_ms"]["p50"] == pytest.approx(-3.0)  # -2, -3, -4 twice
    assert set(got["served"]) == {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "post_ms"}
    c.close()


# ---------------------------------------------------------------- post_ms as a primary metric (the real CLI)


def _design(camp: Path, metric: str, kind: str = "speed", secondary: str = '["tokens_per_step"]') -> Path:
    d = write_design(
        camp / "designs" / f"{kind}-{metric}.toml", kind=kind, candidate_parts="[]" if kind == "aa" else '["threads1"]'
    )
    text = d.read_text().replace('primary_metric = "verify_step_ms"', f'primary_metric = "{metric}"')
    d.write_text(text.replace('secondary = ["tokens_per_step"]', f"secondary = {secondary}"))
    return d


@pytest.fixture
def camp(tmp_path: Path) -> Path:
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl")
    c.close()
    return tmp_path / "c"


@pytest.mark.parametrize(("kind", "rule"), [("speed", "sign"), ("aa", "sign"), ("screen", "permutation")])
def test_post_ms_as_the_primary_metric_of_a_ratio_rule_is_refused(camp: Path, capsys, kind: str, rule: str) -> None:
    d = _design(camp, "post_ms", kind)
    d.write_text(d.read_text().replace('kind = "sign"', f'kind = "{rule}"'))
    code, out, err = cli(capsys, "register", str(d), "-c", str(camp))
    assert (code, out) == (1, ""), (code, out, err)
    assert err.startswith(f"frank: error: {d}: primary_metric: 'post_ms' can be zero or negative "), err
    assert f"a {kind} design's rule '{rule}' tests per-block ratios" in err
    assert "list post_ms under secondary" in err and err.count("\n") == 1 and "Traceback" not in err
    with open_campaign(camp) as c:
        assert c.store.registry_rows() == []  # nothing registered


@pytest.mark.parametrize("metric", ["itl_ms", "tpot_ms", "ttft_ms", "pre_ms"])
def test_a_stream_metric_without_a_stream_is_refused(camp: Path, capsys, metric: str) -> None:
    """A careless design: the primary metric is timed on the client's stream, but the design replays
    without streaming, so every start would come back without it; registration says so, naming the field."""
    d = _design(camp, metric)
    d.write_text(d.read_text().replace("warmup_turns = 1", "warmup_turns = 1\nstream = false"))
    code, out, err = cli(capsys, "register", str(d), "-c", str(camp))
    assert (code, out) == (1, ""), (code, out, err)
    assert err.startswith(f"frank: error: {d}: primary_metric: {metric} is timed on the client's stream"), err
    assert "replay.stream = false" in err and "Traceback" not in err
    with open_campaign(camp) as c:
        assert c.store.registry_rows() == []


def test_post_ms_as_secondary_and_pre_ms_as_primary_register(camp: Path, capsys) -> None:
    """The refusal is for post_ms under a ratio rule only: reported as a secondary metric it is fine, and
    pre_ms (positive by its definition) may be tested."""
    for metric, secondary in (("verify_step_ms", '["post_ms"]'), ("pre_ms", '["post_ms", "tokens_per_step"]')):
        code, out, err = cli(capsys, "register", str(_design(camp, metric, secondary=secondary)), "-c", str(camp))
        assert code == 0 and out.startswith("registered ") and err == "", (code, out, err)
    with open_campaign(camp) as c:
        assert [get(c, r.design_id).design.primary_metric for r in c.store.registry_rows()] == [
            "verify_step_ms",
            "pre_ms",
        ]


def test_a_pre_ms_block_that_is_not_positive_makes_the_verdict_invalid_not_a_crash(camp: Path) -> None:
    """pre_ms may be registered, and is positive unless an engine's clocks disagree; where they do, the ratio
    rule says invalid for that block, and curtailment (which needs log ratios) does not stop the run."""
    d = _design(camp, "pre_ms")
    d.write_text(d.read_text().replace("blocks = 5", 'blocks = 6\nstopping = "curtail"'))
    with open_campaign(camp) as c:
        reg = register(c, d)
        for b in range(3):
            for pos, arm in enumerate(reg.schedule[b]):
                value = -0.25 if (b, arm) == (1, "candidate") else 20.0 if arm == "served" else 10.0
                c.store.insert_start(
                    design_id=reg.design_id,
                    block=b,
                    position=pos,
                    arm=arm,
                    status="ok",
                    started_at="2025-01-01T00:00:00Z",
                    metrics={"pre_ms": value},
                )
        a = analyze(c, reg.design_id)
        assert a.verdict is not None and a.verdict.word == "invalid"
        assert a.verdict.reason == "block 2: a ratio needs positive finite values (served 20, candidate -0.25)"
        assert not settled(c, reg, 3)  # the run goes on: no ratio, nothing to curtail on


def test_an_ok_start_without_the_primary_metric_is_named_not_a_bare_no_blocks(camp: Path) -> None:
    """An engine that reports no prompt time gives ok starts without pre_ms: the analysis names each such start
    and why its block is incomplete, in analyze's lines and the note."""
    d = _design(camp, "pre_ms")
    with open_campaign(camp) as c:
        reg = register(c, d)
        for b in range(2):
            for pos, arm in enumerate(reg.schedule[b]):
                metrics = {"ttft_ms": 5.0} if arm == "candidate" else {"pre_ms": 2.0, "ttft_ms": 6.0}
                c.store.insert_start(
                    design_id=reg.design_id,
                    block=b,
                    position=pos,
                    arm=arm,
                    status="ok",
                    started_at="2025-01-01T00:00:00Z",
                    metrics=metrics,
                )
        lines = format_analysis(analyze(c, reg.design_id))
        starts = [s for s in c.store.starts_of(reg.design_id) if s.arm == "candidate"]
        for s in starts:
            want = f"note: start {s.id} (block {s.block + 1}, candidate) is ok but reported no pre_ms"
            assert any(x.startswith(want) and x.endswith("so its block is incomplete") for x in lines), lines
        note = write_report(c, camp / "out").read_text()
        assert f"Start {starts[0].id} (block 1, candidate) is ok but reported no pre_ms" in note
