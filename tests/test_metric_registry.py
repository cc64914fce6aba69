"""The metric registry is the one place a metric is declared: aggregation, registration checks, per-arm
percentiles, the JSON schemas and docs/designs.md all agree with it, and a metric added to it alone is
registered, folded and analysed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from frankenstein.design.kinds import base
from frankenstein.design.percentiles import LATENCY_METRICS, rows_percentiles
from frankenstein.measure import metrics
from frankenstein.measure.metrics import BUILTIN, Metric
from frankenstein.measure.timings import aggregate, turn_sums
from frankenstein.shipped import data_path

ROOT = Path(__file__).resolve().parents[1]

TURNS: list[dict[str, float | int | None]] = [
    {
        "prompt_tokens": 20,
        "cached_tokens": 4,
        "prompt_ms": 8.0,
        "generated_tokens": 11,
        "decode_ms": 50.0,
        "target_steps": 10,
        "ttft_ms": 10.0,
        "e2e_ms": 64.0,
        "pre_ms": 2.0,
        "post_ms": -1.0,
        "chunk_gaps_ms": [5.0, 5.0, 8.0],
        "drafted": 6,
        "accepted": 3,
    },
    {
        "prompt_tokens": 10,
        "cached_tokens": 0,
        "prompt_ms": 4.0,
        "generated_tokens": 6,
        "decode_ms": 30.0,
        "target_steps": 5,
        "ttft_ms": 6.0,
        "e2e_ms": 40.0,
        "pre_ms": 2.0,
        "post_ms": 4.0,
        "chunk_gaps_ms": [6.0],
    },
]


def test_every_registered_metric_is_documented_in_designs_md() -> None:
    doc = (ROOT / "docs" / "designs.md").read_text()
    missing = [m for m in BUILTIN if f"`{m}`" not in doc]
    assert not missing, f"docs/designs.md does not document: {', '.join(missing)}"


def test_every_metric_declares_a_fold_it_can_compute() -> None:
    sums = turn_sums(TURNS)
    for m in BUILTIN.values():
        assert (m.fold == "ratio_of_sums") == (m.sums is not None), m.name
        if m.sums:
            assert set(m.sums) <= set(sums), f"{m.name} folds sums turn_sums does not compute: {m.sums}"
        assert m.unit and m.meaning, m.name


def test_aggregate_folds_each_metric_as_a_ratio_of_sums() -> None:
    got = aggregate(TURNS)
    expected = {
        "verify_step_ms": 80.0 / 15,
        "decode_ms_per_token": 80.0 / 15,
        "tokens_per_step": 1.0,
        "prompt_ms": 6.0,
        "prefill_tokens_per_s": 26 * 1000.0 / 12.0,
        "ttft_ms": 8.0,
        "e2e_ms": 52.0,
        "tpot_ms": (104.0 - 16.0) / 15,
        "itl_ms": 24.0 / 4,
        "pre_ms": 2.0,
        "post_ms": 1.5,
        "acceptance_rate": 0.5,  # over the one turn that drafted: the other does not blank it
    }
    assert {k: got[k] for k in expected} == pytest.approx(expected)
    assert set(got) >= {m for m, d in BUILTIN.items() if d.sums}


def test_the_registry_answers_what_the_kinds_and_percentiles_asked_of_five_tuples() -> None:
    assert set(metrics.names(needs="stream")) == {"ttft_ms", "pre_ms", "post_ms", "tpot_ms", "itl_ms", "goodput"}
    assert metrics.names(needs="drafting") == ("acceptance_rate",) and metrics.names(signed=True) == ("post_ms",)
    start = {"passes", "output_tokens_per_s", "requests_per_s", "goodput"}
    assert set(metrics.names(scope="step")) | set(metrics.names(scope="request")) == set(BUILTIN) - start
    assert set(metrics.names(scope="start")) == start - {"passes"}
    assert LATENCY_METRICS == ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "pre_ms", "post_ms")
    assert tuple(rows_percentiles(TURNS)) == LATENCY_METRICS
    assert metrics.direction("tokens_per_step") == "higher" and metrics.direction("e2e_ms") == "lower"


def _enums(node: object) -> list[list[str]]:
    """Every enum of metric names in a JSON schema."""
    out: list[list[str]] = []
    if isinstance(node, dict):
        enum = node.get("enum")
        if isinstance(enum, list) and "ttft_ms" in enum:
            out.append(enum)
        for v in node.values():
            out += _enums(v)
    elif isinstance(node, list):
        for v in node:
            out += _enums(v)
    return out


@pytest.mark.parametrize("schema", ["analysis.schema.json", "replay.schema.json"])
def test_the_schemas_percentile_enums_are_the_registrys(schema: str) -> None:
    enums = _enums(json.loads(data_path(f"schemas/{schema}").read_text()))
    assert enums and all(tuple(e) == LATENCY_METRICS for e in enums)


def test_a_metric_is_added_by_its_registry_entry_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A test-only metric (time per turn outside the server's decode, per turn) declared in the registry
    only: aggregation folds it, the kinds' checks and the percentile list see it."""
    m = Metric("decode_free_ms", "ms", "lower", "request", "e2e − decode ms per turn", ("stream",),
               sums=("e2e_ms", "turns"), percentiles=True)  # fmt: skip
    monkeypatch.setitem(BUILTIN, m.name, m)
    assert aggregate(TURNS)["decode_free_ms"] == pytest.approx(52.0)
    assert "decode_free_ms" in metrics.names(needs="stream")
    assert base.metric_scope("decode_free_ms").startswith("per-request time (`decode_free_ms`)")
