"""``frank plan DESIGN.toml --budget --pilot``: a design file planned before registration from a pilot design run
on the real llama-server; the estimate (the pilot's start phases, its replay scaled by the new workload's turns)
checked against the real run of the planned design, with three times the pilot's turns. Bad input is one message."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from conftest import frank
from frankenstein.campaign import open_campaign
from frankenstein.design.budget import budget_plan, parse_budget
from frankenstein.design.plan import wall_time
from frankenstein.design.registry import register
from frankenstein.design.runner import run_design
from frankenstein.design.timespent import summarize
from frankenstein.errors import AnalysisError
from helpers_campaign import make_campaign, make_workload, write_design

pytestmark = pytest.mark.engine

MAX_ERROR = 0.5  # the shared two-core machine, as in test_walltime


def _design(root: Path, name: str, blocks: int, workload: str) -> Path:
    p = write_design(root / f"{name}.toml", name=name, blocks=blocks, workload=workload)
    p.write_text(p.read_text().replace("alpha = 0.05", "alpha = 0.5"))
    return p


@pytest.fixture(scope="module")
def camp(tmp_path_factory: pytest.TempPathFactory, llama_server_bin: str) -> Path:
    c = make_campaign(tmp_path_factory.mktemp("budget") / "c")
    make_workload(c.root / "workloads" / "w.jsonl", turns=4, tokens=64)
    make_workload(c.root / "workloads" / "w12.jsonl", turns=12, tokens=64)
    reg = register(c, _design(c.root, "pilot", 3, "workloads/w.jsonl"))
    run_design(c, reg.design_id, echo=lambda s: None)
    c.close()
    return c.root


def test_frank_plan_of_a_design_file_prints_each_rule_under_the_budget(camp: Path) -> None:
    design = _design(camp, "big", 3, "workloads/w12.jsonl")
    r = frank("plan", str(design), "--budget", "30m", "--pilot", "pilot-1", "-c", str(camp), "--effect", "0.1")
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0] == f"design {design}: 2 arms × 1 start(s), 3 blocks, 12 turns per start, rule sign, stopping none"
    assert "from pilot pilot-1's 6 starts of 4 turns, replay scaled ×3.67 (turns after the warm-up)" in out[1]
    assert out[2].startswith("spread: sd ") and "(pilot pilot-1: sd " in out[2]
    assert out[3].startswith("budget 30 min: ") and " blocks fit" in out[3]
    rows = {line.split()[0]: line for line in out[6:10]}
    assert set(rows) == {"sign", "all_blocks_better", "permutation", "order_adjusted"}  # balanced: the default
    assert "(registered)" in rows["sign"]
    advice = [line for line in out if line.startswith('recommended: stopping = "curtail"')]
    assert len(advice) == 1 and "saved at the planned effect" in advice[0]


def test_the_estimate_with_the_replay_scaled_matches_the_real_run(camp: Path) -> None:
    design = _design(camp, "real", 3, "workloads/w12.jsonl")
    with open_campaign(camp) as c:
        plan = budget_plan(c, design, "pilot-1", effect=0.1, budget_s=parse_budget("30m"), sd=0.05)
        unscaled = wall_time(summarize(c.store.starts_of("pilot-1")), 3).seconds
        estimate = plan.rows[0].seconds
        reg = register(c, design)
        t0 = time.monotonic()
        run_design(c, reg.design_id, echo=lambda s: None)
        actual = time.monotonic() - t0
    error, old = (estimate - actual) / actual, (unscaled - actual) / actual
    print(
        f"\nestimate {estimate:.2f} s (unscaled {unscaled:.2f} s), real run {actual:.2f} s: {error:+.1%} ({old:+.1%})"
    )
    assert plan.start.turns == 12 and plan.start.pilot_turns == 4
    assert estimate > unscaled
    assert abs(error) < MAX_ERROR


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--budget", "soon"], "--budget 'soon': expected a duration like 2h, 30m, 90s or 1h30m"),
        (["--budget", "30m", "--pilot", "nope-1"], "no registered design 'nope-1'"),
        (["--budget", "30m"], "--pilot DESIGN_ID"),
    ],
)
def test_bad_design_plan_input_is_one_message(camp: Path, args: list[str], message: str) -> None:
    design = _design(camp, "bad", 3, "workloads/w.jsonl")
    if "--pilot" not in args:
        args = [*args, "--pilot", "pilot-1"] if "soon" in args else args
    r = frank("plan", str(design), "-c", str(camp), *args)
    assert r.returncode != 0 and message in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_budget_words() -> None:
    assert parse_budget("1h30m") == 5400 and parse_budget("90s") == 90 and parse_budget("2h") == 7200
    for bad in ("", "0m", "m", "5", "1x"):
        with pytest.raises(AnalysisError):
            parse_budget(bad)
