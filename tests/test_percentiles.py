"""Per-arm latency percentiles from stored per-turn rows: numpy's default definition, the ITL formula,
and which turns count (measured turns of ok starts only)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from frankenstein.design.percentiles import arm_percentiles, percentile, turn_values
from frankenstein.design.registry import register

from helpers_campaign import make_campaign, make_workload, write_design


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


def test_itl_is_the_client_decode_time_over_tokens_after_the_first() -> None:
    assert turn_values({"ttft_ms": 50.0, "e2e_ms": 150.0, "generated_tokens": 11}) == {
        "ttft_ms": 50.0,
        "e2e_ms": 150.0,
        "itl_ms": 10.0,
    }
    assert "itl_ms" not in turn_values({"ttft_ms": 50.0, "e2e_ms": 60.0, "generated_tokens": 1})
    assert turn_values({"ttft_ms": None, "e2e_ms": 60.0, "generated_tokens": 8}) == {"e2e_ms": 60.0}  # not streamed
    assert turn_values({"ttft_ms": float("nan"), "e2e_ms": True, "generated_tokens": 8}) == {}


def test_only_measured_turns_of_ok_starts_count(tmp_path) -> None:
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl")
    reg = register(c, write_design(c.root / "d.toml", blocks=5))

    def turns(base: float) -> list[dict]:
        rows = [
            {"idx": i, "turn_id": f"t{i}", "warmup": 0, "ttft_ms": base + i, "e2e_ms": base * 10, "generated_tokens": 9}
            for i in range(4)
        ]
        rows[0]["warmup"] = 1  # warm-up: not measured
        rows[0]["ttft_ms"] = 1e6
        rows.append({"idx": 4, "turn_id": "t4", "warmup": 0, "error": "turn t4: 400", "ttft_ms": 1e6})
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
    got = arm_percentiles(c.store, reg.design_id)
    assert list(got) == ["served", "candidate"]
    assert got["served"]["ttft_ms"] == {"n": 6, "p50": 102.0, "p90": 103.0, "p99": 103.0}
    assert got["candidate"]["ttft_ms"]["n"] == 3 and got["candidate"]["ttft_ms"]["p99"] == pytest.approx(52.98)
    assert got["candidate"]["itl_ms"]["p50"] == pytest.approx((500.0 - 52.0) / 8)
    assert set(got["served"]) == {"ttft_ms", "itl_ms", "e2e_ms"}
    c.close()
