"""Concurrency and request-rate designs (issue 32 item 7).

- The send schedule is a pure function of seed, rate, arrivals and turn count (fixed: 1/rate apart; poisson:
  exponential gaps, the same for every call with one seed); a design without the new fields keeps its
  canonical text.
- Throughput and goodput over the measured wall span, counted by hand on fixed rows (AIPerf's goodput: a request
  counts when every target holds).
- Registration refuses goodput without targets, targets without a stream and arrivals without a rate, naming
  the field (the real CLI).
- A real llama-server design at concurrency 4 with a rate limit, run and analysed through the real CLI: never more
  than 4 requests in flight, every request sent no earlier than it was due, throughput and goodput per start
  (recomputed from the rows' own clock readings, to the µs) and per arm in analyze, and the part adopted with
  concurrency 4 as its scope.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from frankenstein.campaign import open_campaign
from frankenstein.engines import start_engine
from frankenstein.errors import EngineRequestError
from frankenstein.workload.trace import workload_from_turns
from frankenstein.measure.timings import meets, start_rates
from frankenstein.scope import AdoptedScope, with_design_concurrency, adopted_for
from frankenstein.workload.replay import GoodputTargets, ReplaySettings, replay, send_offsets

from helpers_campaign import TOML, make_campaign, make_workload, write_design
from helpers_cli import cli
from test_replay import _frozen_recipe, _turns


def test_fixed_arrivals_are_one_over_the_rate_apart() -> None:
    assert send_offsets(5, 4.0, "fixed") == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert send_offsets(3, None) == [0.0, 0.0, 0.0]  # no rate: the concurrency alone paces them


def test_poisson_arrivals_are_a_pure_function_of_the_seed() -> None:
    a = send_offsets(2000, 10.0, "poisson", seed=7)
    assert a == send_offsets(2000, 10.0, "poisson", seed=7)  # every arm, start and rerun: the same times
    assert a != send_offsets(2000, 10.0, "poisson", seed=8)
    assert a[0] == 0.0 and all(x < y for x, y in zip(a, a[1:]))
    gaps = [y - x for x, y in zip(a, a[1:])]
    assert sum(gaps) / len(gaps) == pytest.approx(0.1, rel=0.1)  # mean gap 1 / rate
    assert max(gaps) > 3 * min(gaps) * 10  # exponential, not evenly spaced


def test_a_design_without_load_fields_keeps_its_canonical_text() -> None:
    assert ReplaySettings().model_dump() == ReplaySettings.model_validate({"concurrency": 1}).model_dump()
    assert not {"rate", "arrivals", "goodput"} & set(ReplaySettings().model_dump())
    loaded = ReplaySettings(rate=2.0, goodput=GoodputTargets(ttft_ms=500)).model_dump()
    assert loaded["rate"] == 2.0 and loaded["goodput"] == {"ttft_ms": 500.0, "itl_ms": None}
    with pytest.raises(ValueError, match="at least one target"):
        GoodputTargets()


ROWS = [
    {"ttft_ms": 100.0, "generated_tokens": 10, "chunk_gaps_ms": [10.0, 20.0]},  # ttft ok, itl 15: ok
    {"ttft_ms": 600.0, "generated_tokens": 10, "chunk_gaps_ms": [10.0]},  # ttft over
    {"ttft_ms": 100.0, "generated_tokens": 20, "chunk_gaps_ms": [60.0, 50.0]},  # itl 55: over
    {"ttft_ms": 50.0, "generated_tokens": 1, "chunk_gaps_ms": []},  # one event: no gap, meets itl
]


def test_throughput_and_goodput_over_the_wall_span() -> None:
    got = start_rates(ROWS, 2.0, (500.0, 50.0))
    assert got == {"output_tokens_per_s": 41 / 2.0, "requests_per_s": 4 / 2.0, "goodput": 2 / 2.0}
    assert start_rates(ROWS, 2.0, (None, 50.0))["goodput"] == 3 / 2.0  # only the ITL target
    assert start_rates(ROWS, 2.0, None)["goodput"] is None  # no targets registered: no goodput
    assert start_rates(ROWS, None, (500.0, 50.0)) == dict.fromkeys(("output_tokens_per_s", "requests_per_s", "goodput"))
    assert start_rates([*ROWS, {"ttft_ms": 1.0}], 2.0, None)["output_tokens_per_s"] is None  # a count missing
    assert not meets({"generated_tokens": 3}, 500.0, None)  # not streamed: no TTFT, the target is missed
    assert not meets({"ttft_ms": 1.0}, None, 50.0)  # no gaps recorded: the ITL target is missed


def test_a_given_concurrency_scope_wins_over_the_design_s() -> None:
    assert with_design_concurrency(AdoptedScope(concurrency=2), 4).concurrency == 2
    assert with_design_concurrency(AdoptedScope(note="x"), 4).recorded() == {"concurrency": 4, "note": "x"}
    assert with_design_concurrency(AdoptedScope(), 1).recorded() == {}  # one at a time: recorded only when given


@pytest.fixture
def camp(tmp_path: Path) -> Path:
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl")
    c.close()
    return c.root


@pytest.mark.parametrize(
    ("edit", "field", "words"),
    [
        ('secondary = ["goodput"]', "replay.goodput", "goodput counts the requests that meet the registered"),
        (
            "secondary = []\n[replay]\nstream = false\ngoodput = { ttft_ms = 500 }",
            "replay.goodput",
            "replay.stream = false",
        ),
        ('secondary = []\n[replay]\narrivals = "fixed"', "replay.arrivals", "set replay.rate"),
        ("secondary = []\n[replay]\nrate = -1.0", "replay.rate", "greater than 0"),
        ("secondary = []\n[replay]\ngoodput = { ttft = 500 }", "replay.goodput.ttft", ""),
    ],
)
def test_careless_load_settings_are_refused_naming_the_field(
    camp: Path, capsys: pytest.CaptureFixture[str], edit: str, field: str, words: str
) -> None:
    d = write_design(camp / "d.toml")
    text = d.read_text().replace('secondary = ["tokens_per_step"]', edit)
    if "[replay]\n" in edit:
        text = text.replace("\n[replay]\nwarmup_turns = 1\n", "\n")
    d.write_text(text)
    code, out, err = cli(capsys, "register", str(d), "-c", str(camp))
    assert (code, out) == (1, ""), (code, out, err)
    assert err.startswith(f"frank: error: {d}: {field}"), err
    assert words in err and "Traceback" not in err
    with open_campaign(camp) as c:
        assert c.store.registry_rows() == []


# ---------------------------------------------------------------- a real llama-server design at concurrency 4

LOAD_TOML = (
    TOML
    + """
[parts.slots4]
description = "four server slots: requests decoded together"
set = { "--parallel" = "4" }
"""
)
RATE = 400.0  # requests/s after the warm-up: faster than the engine answers, so requests wait for a free place
TARGETS = {"ttft_ms": 2000.0, "itl_ms": 200.0}


def _in_flight(rows: list[dict]) -> int:
    """The most requests a start had in flight at once, from each row's send time and client e2e."""
    spans = [(r["sent_ms"], r["sent_ms"] + r["e2e_ms"]) for r in rows]
    return max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)


def _per_span(count: int, span_s: float) -> object:
    """``count`` over the span recomputed from a start's rows: the same clock readings frank divided by, each end
    rounded to 1 µs in the rows, so the two spans differ by 1 µs at most (2 µs allowed, for float error). A
    check that owes nothing to how busy the machine was while the start ran."""
    return pytest.approx(count / span_s, rel=2e-6 / span_s)


@pytest.mark.engine
def test_a_design_at_concurrency_4_with_a_rate_reports_throughput_and_goodput_per_arm(
    llama_server_bin: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c = make_campaign(tmp_path / "c", toml=LOAD_TOML)
    make_workload(c.root / "workloads" / "w.jsonl", turns=9, tokens=12)
    c.close()
    d = write_design(tmp_path / "c" / "d.toml", blocks=5, candidate_parts='["slots4"]')
    text = d.read_text().replace('primary_metric = "verify_step_ms"', 'primary_metric = "output_tokens_per_s"')
    text = text.replace('secondary = ["tokens_per_step"]', 'secondary = ["goodput", "requests_per_s", "ttft_ms"]')
    goodput = ", ".join(f"{k} = {v}" for k, v in TARGETS.items())
    d.write_text(text + f'concurrency = 4\nrate = {RATE}\narrivals = "poisson"\ngoodput = {{ {goodput} }}\n')
    code, out, err = cli(capsys, "register", str(d), "-c", str(c.root))
    assert code == 0, err
    design_id = re.match(r"registered (\S+) ", out).group(1)  # type: ignore[union-attr]
    code, out, err = cli(capsys, "run", design_id, "-c", str(c.root))
    assert code == 0, (out, err)

    due = send_offsets(8, RATE, "poisson", seed=1)
    with open_campaign(c.root) as camp:
        starts = camp.store.starts_of(design_id)
        assert len(starts) == 10 and all(s.ok for s in starts)
        for s in starts:
            rows = [t for t in camp.store.turns_of(s.id) if not t["warmup"]]
            assert [r["due_ms"] for r in rows] == pytest.approx([x * 1000 for x in due], abs=0.002)
            assert all(r["sent_ms"] >= r["due_ms"] - 0.001 for r in rows)  # never before it was due
            assert _in_flight(rows) <= 4
            # each client e2e lies inside the replay's own clock readings around its request (1 µs of rounding;
            # time.perf_counter and time.monotonic are both CLOCK_MONOTONIC on Linux)
            assert all(r["sent_ms"] + r["e2e_ms"] <= r["done_ms"] + 0.001 for r in rows)
            span_s = (max(r["done_ms"] for r in rows) - min(r["sent_ms"] for r in rows)) / 1000
            assert s.metrics["output_tokens_per_s"] == _per_span(8 * 12, span_s)
            assert s.metrics["requests_per_s"] == _per_span(8, span_s)
            good = sum(meets(r, TARGETS["ttft_ms"], TARGETS["itl_ms"]) for r in rows)
            assert s.metrics["goodput"] == _per_span(good, span_s)
        # due faster than answered: requests overlapped, and some waited for one of the 4 places
        measured = [[t for t in camp.store.turns_of(s.id) if not t["warmup"]] for s in starts]
        assert max(_in_flight(rows) for rows in measured) > 1
        assert max(r["sent_ms"] - r["due_ms"] for rows in measured for r in rows) > 0.5

    code, out, err = cli(capsys, "analyze", design_id, "-c", str(c.root), "--json")
    assert (code, err) == (0, ""), err
    doc = json.loads(out)
    assert doc["secondary"]["goodput"]["blocks"] == 5 and doc["secondary"]["requests_per_s"]["blocks"] == 5
    code, text, err = cli(capsys, "analyze", design_id, "-c", str(c.root))
    assert code == 0, err
    assert re.search(r"goodput: geometric-mean ratio \d", text), text
    head = text.index("throughput per arm (mean over its starts, range;")
    for arm in ("served", "candidate"):
        for m, unit in (
            ("output_tokens_per_s", "tokens/s"),
            ("goodput", "requests/s"),
            ("requests_per_s", "requests/s"),
        ):
            assert re.search(rf"^  {arm}\s+{m}\s+[\d.]+ {unit} \([\d.]+ to [\d.]+\)$", text[head:], re.M), text

    # adopt records the design's concurrency as the part's scope when none is given, and says so
    code, out, err = cli(
        capsys, "adopt", "slots4", "-d", design_id, "--force", "--why", "scope test", "-c", str(c.root)
    )
    assert code == 0, err
    assert "  adopted for: concurrency up to 4" in out
    assert f"concurrency 4 recorded as its scope: design {design_id} ran at replay.concurrency = 4" in out
    with open_campaign(c.root) as camp:
        assert adopted_for(camp.store.last_steps(1)[0]) == {"concurrency": 4}
    # the note says what load the design was tested at
    code, out, err = cli(capsys, "report", "-c", str(c.root), "-o", str(tmp_path / "note"))
    assert code == 0, err
    note = (tmp_path / "note" / "note.md").read_text()
    assert f"Tested at concurrency 4 with {RATE:g} requests/s (poisson arrivals)" in note


def test_an_engine_that_never_answers_fails_a_concurrent_rate_start_without_hanging(tmp_path: Path) -> None:
    """The frozen stand-in process (tests/data/frozen_engine.py: /health, then never a completion) at concurrency 4
    and 50 requests/s: the first timed-out request stops the dispatch and the replay raises naming the bound,
    after the 4 requests in flight time out (about 1 s), not after all 40 (10 s)."""
    settings = ReplaySettings(
        warmup_turns=0, concurrency=4, rate=50.0, arrivals="fixed", prefill_timeout_s=0.5, timeout_per_token_s=0.1
    )
    with start_engine(_frozen_recipe(), tmp_path) as eng:
        t0 = time.monotonic()
        with pytest.raises(EngineRequestError, match=r"sent nothing for 1.0 s \(request timeout\)"):
            replay(eng, workload_from_turns(_turns(40, 5)), settings)
        took = time.monotonic() - t0
    assert 1.0 <= took < 5.0, took
