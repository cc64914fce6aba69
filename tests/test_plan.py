"""The planner: pilot spread, exact and simulated power, blocks needed, and `frank plan`."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from frankenstein.cli import main
from frankenstein.design import plan
from frankenstein.design.rules import parse_rule
from frankenstein.design.table import format_plan
from frankenstein.errors import AnalysisError


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(args)
    out = capsys.readouterr()
    return int(info.value.code or 0), out.out, out.err


def test_effect_gain_on_the_log_scale() -> None:
    assert plan.effect_gain(0.05, "lower") == pytest.approx(-math.log(0.95))  # time x 0.95
    assert plan.effect_gain(0.05, "higher") == pytest.approx(math.log(1.05))  # throughput x 1.05
    assert plan.effect_gain(0.05, "lower", worse=True) == pytest.approx(math.log(1.05))
    with pytest.raises(AnalysisError, match="zero or negative"):
        plan.effect_gain(1.0, "lower")


def test_pilot_spread_by_hand() -> None:
    s = plan.pilot_spread([0.01, -0.01, 0.02, -0.02])
    # sd = sqrt((1 + 1 + 4 + 4) e-4 / 3); the start's own spread is sd / sqrt 2.
    assert s.sd == pytest.approx(math.sqrt(10e-4 / 3))
    assert s.start_sd == pytest.approx(s.sd / math.sqrt(2))
    assert s.sd_upper == pytest.approx(s.sd * math.sqrt(3 / sps.chi2.ppf(0.10, 3)))
    assert s.aa_p == 1  # sum exactly 0: nothing distinguishes the arms
    with pytest.raises(AnalysisError, match="at least 2 blocks"):
        plan.pilot_spread([0.01])


def test_exact_power_of_sign_and_all_blocks_better() -> None:
    sd, effect = 0.03, 0.05
    q = sps.norm.cdf(-math.log(0.95) / sd)  # chance a block favours the candidate
    assert plan.power(parse_rule("all_blocks_better"), 5, sd, effect, "lower").value == pytest.approx(q**5)
    # n = 8 at 0.05 needs 7 in favour: P(X>=7) = 9/256 <= 0.05 < P(X>=6) = 37/256.
    assert plan.power(parse_rule("sign"), 8, sd, effect, "lower").value == pytest.approx(q**8 + 8 * q**7 * (1 - q))
    assert plan.power(parse_rule("sign"), 4, sd, effect, "lower").value == 0.0  # unreachable


def test_blocks_needed_is_the_first_reaching_the_target() -> None:
    rule, sd, effect = parse_rule("sign"), 0.03, 0.05
    row = plan.plan_blocks(rule, sd, effect, "lower")
    powers = {n: plan.power(rule, n, sd, effect, "lower").value for n in range(5, 41)}
    first = min(n for n, p in powers.items() if p >= 0.8)
    assert (row.blocks, row.power) == (first, powers[first])
    assert row.blocks == 8  # q = 0.956: 5 blocks give 0.7997, 6 and 7 need all in favour


def test_simulated_permutation_power_is_close_to_the_t_test() -> None:
    """With normal noise the sign-flip test is nearly as efficient as the one-sample t-test."""
    n, sd, effect = 10, 0.05, 0.03
    d = -math.log(0.97)
    t_power = float(sps.nct.sf(sps.t.ppf(0.95, n - 1), n - 1, d / sd * math.sqrt(n)))
    sim = plan.power(parse_rule("permutation"), n, sd, effect, "lower", simulations=1500, seed=4)
    assert sim.method == "simulation: 1500 designs, seed 4"
    assert abs(sim.value - t_power) < 0.05
    again = plan.power(parse_rule("permutation"), n, sd, effect, "lower", simulations=1500, seed=4)
    assert again == sim


def test_harm_rule_plans_for_the_candidate_being_worse() -> None:
    better = plan.power(parse_rule("permutation"), 8, 0.04, 0.05, "lower", simulations=500, seed=2)
    harm = plan.power(parse_rule("harm"), 8, 0.04, 0.05, "lower", simulations=500, seed=2)
    assert harm.value > 0.5 and abs(harm.value - better.value) < 0.1


def test_normal_limit_beyond_exact_simulation() -> None:
    pw = plan.power(parse_rule("permutation"), 30, 0.1, 0.05, "lower", simulations=500, seed=1)
    assert "normal limit" in pw.method
    t_power = float(sps.nct.sf(sps.t.ppf(0.95, 29), 29, -math.log(0.95) / 0.1 * math.sqrt(30)))
    assert abs(pw.value - t_power) < 0.07


def test_no_block_count_up_to_the_cap(tmp_path: Path) -> None:
    p = plan.make_plan([parse_rule("sign"), parse_rule("all_blocks_better")], 0.2, 0.05, "lower", max_blocks=12)
    assert [r.blocks for r in p.rows] == [None, None]
    lines = format_plan(p)
    # q = Phi(ln(1/0.95) / 0.2) = 0.601; at 11 blocks (10 needed) P(X >= 10) = 0.1205, the best up to 12.
    assert "no block count up to 12 gives the sign rule 80% power (best: 12.0% at 11 blocks)" in lines
    assert lines[:2] == [
        "spread of the block log ratio: sd 0.2000 (given)",
        "effect: 5% (lower is better); target power 80%; at most 12 blocks; model: independent normal block log ratios",
    ]


def test_cli_plan_with_sd(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(
        [
            "plan",
            "--sd",
            "0.03",
            "--effect",
            "0.05",
            "--direction",
            "lower",
            "--rule",
            "sign",
            "--rule",
            "all_blocks_better",
        ],
        capsys,
    )
    assert (rc, err) == (0, "")
    assert out.splitlines()[3:] == [
        "rule               alpha  blocks  power  method",
        "-----------------  -----  ------  -----  --------------------",
        "sign                0.05       8  95.5%  exact (normal model)",
        "all_blocks_better   0.05    > 40  79.9%  exact (normal model)",
        "no block count up to 40 gives the all_blocks_better rule 80% power (best: 79.9% at 5 blocks)",
    ]


def test_cli_plan_from_a_pilot_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(8)
    s = rng.uniform(9, 11, 6)
    c = s * np.exp(rng.normal(0, 0.03, 6))
    p = tmp_path / "aa.csv"
    p.write_text("block,served,candidate\n" + "".join(f"{i},{a},{b}\n" for i, (a, b) in enumerate(zip(s, c), 1)))
    rc, out, _ = run(
        [
            "plan",
            "--pilot",
            str(p),
            "--effect",
            "0.05",
            "--direction",
            "lower",
            "--rule",
            "permutation",
            "--simulations",
            "300",
        ],
        capsys,
    )
    lines = out.splitlines()
    assert rc == 0
    assert lines[0] == f"pilot: {p}: 6 blocks"
    assert lines[3].startswith("  start-to-start spread: about ")
    assert any(line.startswith("at the 90% upper bound of the spread (sd ") for line in lines)


def test_cli_plan_warns_when_the_aa_arms_differ(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "aa.csv"
    p.write_text("block,served,candidate\n1,10,9.0\n2,10,9.6\n3,10,9.5\n4,10,9.7\n5,10,9.8\n6,10,9.4\n")
    rc, out, _ = run(["plan", "--pilot", str(p), "--effect", "0.05", "--direction", "lower", "--rule", "sign"], capsys)
    assert rc == 0
    # All six A/A log ratios negative: two-sided p = 2/64.
    assert out.splitlines()[-1] == (
        "warning: the A/A arms differ (p = 1/32 = 0.03125): look for order or warm-up effects before trusting any plan"
    )


def test_cli_plan_warns_on_a_small_pilot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "aa.csv"
    p.write_text("block,served,candidate\n1,10,9.0\n2,10,9.6\n3,10,9.5\n4,10,9.7\n")
    rc, out, _ = run(["plan", "--pilot", str(p), "--effect", "0.05", "--direction", "lower", "--rule", "sign"], capsys)
    assert (rc, out.splitlines()[-1]) == (
        0,
        "warning: a spread from 4 blocks is rough; prefer the plan at the upper bound",
    )


def test_cli_plan_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(["plan", "--effect", "0.05", "--direction", "lower"], capsys)
    assert (rc, err) == (1, "frank: error: give either --pilot FILE.csv or --sd, not both or neither\n")
    rc, _, err = run(["plan", "--sd", "0.02", "--effect", "0.05", "--direction", "lower", "--power", "1.2"], capsys)
    assert (rc, err) == (1, "frank: error: --power must be between 0 and 1, got 1.2\n")
    diff = tmp_path / "d.csv"
    diff.write_text("block,difference\n1,2\n2,3\n")
    rc, _, err = run(["plan", "--pilot", str(diff), "--effect", "0.05", "--direction", "lower"], capsys)
    assert (rc, err) == (1, f"frank: error: {diff}: a pilot needs start-level values per arm: block,served,candidate\n")
    same = tmp_path / "same.csv"
    same.write_text("block,served,candidate\n1,10,10\n2,5,5\n")
    rc, _, err = run(["plan", "--pilot", str(same), "--effect", "0.05", "--direction", "lower"], capsys)
    assert (rc, err) == (1, "frank: error: the pilot's log ratios are all equal: no spread to plan with\n")


# ---------------------------------------------------------------- wall time (tests/test_walltime.py: against a real run)


def _summary(served: float, candidate: float, engine: float, gap: float) -> object:
    from frankenstein.design.timespent import ArmTime, TimeSummary

    arms = tuple(
        ArmTime(arm, 4, {"launch": 0.0, "ready": engine, "stop": 0.0, "replay": total - engine, "write": gap}, total)
        for arm, total in (("served", served), ("candidate", candidate))
    )
    return TimeSummary(arms, 8, 0, 4 * (served + candidate), 7 * gap, 8 * engine, 0, "warm", 0, 0)


def test_wall_time_is_blocks_times_each_arms_start_and_gap() -> None:
    w = plan.wall_time(_summary(600.0, 660.0, 450.0, 2.0), 10)  # type: ignore[arg-type]
    assert w.starts == 20 and w.seconds == pytest.approx(10 * (602.0 + 662.0))
    assert w.engine_share == pytest.approx(10 * 900.0 / w.seconds)
    assert w.line() == "10 blocks × 2 arms: about 3 h 31 min, 71% of it engine starts"


def test_the_curtailed_expectation_of_all_blocks_better_at_no_effect() -> None:
    """all_blocks_better is settled by the first block against the candidate: at no effect the runner
    stops after min(K, 10) blocks, K geometric(1/2), whose mean is 2 (1 - 2^-10)."""
    rule = parse_rule("all_blocks_better")
    expected = plan.expected_curtailed_blocks(rule, 10, 0.05, 0.0, simulations=2000)
    assert expected == pytest.approx(2 * (1 - 2**-10), abs=0.1)
    strong = plan.expected_curtailed_blocks(rule, 10, 0.05, 1.0, simulations=200)  # never against: all 10 run
    assert strong == 10


def test_cli_plans_the_order_adjusted_rule_at_the_measured_gpu_spread(capsys: pytest.CaptureFixture[str]) -> None:
    """At the H200's measured sd (0.0108) and a 2 % effect the order-adjusted test needs 10 blocks (its smallest p
    is 1/2^(n/2): no fewer can reach 0.05), the per-block permutation test 5."""
    args = ["plan", "--sd", "0.0108", "--effect", "0.02", "--direction", "lower"]
    rc, out, err = run([*args, "--rule", "order_adjusted", "--rule", "permutation"], capsys)
    assert (rc, err) == (0, "")
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("order_adj", "permut"))}
    assert rows["order_adjusted"][2] == "10" and rows["permutation"][2] == "5"


def test_cli_design_plan_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--budget without a design file, a design file without a pilot, and a missing design file: one message each."""
    rc, _, err = run(["plan", "--budget", "30m", "--sd", "0.02", "--effect", "0.05", "--direction", "lower"], capsys)
    assert rc == 2 and "--budget plans a design file: give DESIGN.toml" in err and "Traceback" not in err
    rc, _, err = run(["plan", str(tmp_path / "x.toml"), "--budget", "30m"], capsys)
    assert rc == 2 and "--pilot DESIGN_ID" in err
    rc, _, err = run(["plan", str(tmp_path / "x.toml"), "--pilot", "aa-1", "-c", str(tmp_path)], capsys)
    assert rc != 0 and "Traceback" not in err and err.startswith("frank: error:"), err
