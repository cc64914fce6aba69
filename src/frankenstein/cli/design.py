"""Design commands: analyze (a registered design, or block values from a CSV) and plan."""

from __future__ import annotations

import math

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from frankenstein.cli.app import app

if TYPE_CHECKING:
    from frankenstein.campaign import Campaign


class RuleName(str, Enum):
    all_blocks_better = "all_blocks_better"
    sign = "sign"
    permutation = "permutation"
    harm = "harm"
    all_blocks_by = "all_blocks_by"
    mean_by = "mean_by"
    order_adjusted = "order_adjusted"


class PlanRuleName(str, Enum):
    all_blocks_better = "all_blocks_better"
    sign = "sign"
    permutation = "permutation"
    order_adjusted = "order_adjusted"
    harm = "harm"


class DirectionName(str, Enum):
    lower = "lower"  # type: ignore[assignment]  # str.lower; typer needs a str Enum
    higher = "higher"


class SideName(str, Enum):
    better = "better"
    worse = "worse"
    two_sided = "two-sided"


class UnitName(str, Enum):
    relative = "relative"
    metric = "metric"


class HarmTest(str, Enum):
    permutation = "permutation"
    sign = "sign"


def _echo_lines(lines: list[str]) -> None:
    for line in lines:
        typer.echo(line)


def warn_overrides(campaign: Campaign, seen: int) -> None:
    """One line on stderr for each override recorded since the campaign had ``seen`` of them: the command
    goes on past a failed verification under ``--force --why``, and says so before anything else."""
    for o in campaign.store.overrides()[seen:]:
        typer.echo(
            f"warning: verification failed ({o.problem}); going on because --force --why {o.why!r} "
            f"(recorded as override {o.seq})",
            err=True,
        )


def verified_or_warn(campaign: Campaign, command: str, *, force: bool, why: str | None) -> None:
    """``registry.verified``, then the warning line if it went on under ``--force --why`` past a failure."""
    from frankenstein.design.registry import verified

    seen = len(campaign.store.overrides())
    verified(campaign, command, force=force, why=why)
    warn_overrides(campaign, seen)


@app.command()
def analyze(
    design_id: str | None = typer.Argument(None, help="A registered design (omit with --blocks)."),
    blocks: Path | None = typer.Option(
        None,
        "--blocks",
        help="CSV: block,served,candidate or block,difference (paired), or arm,value (unpaired starts).",
    ),
    rule: RuleName | None = typer.Option(None, "--rule", help="Decision rule (with --blocks)."),
    direction: DirectionName | None = typer.Option(None, "--direction", help="Which way is better for the candidate."),
    alpha: float | None = typer.Option(None, "--alpha", help="Significance level (default 0.05)."),
    side: SideName | None = typer.Option(
        None, "--side", help="permutation and order_adjusted rules: better, worse or two-sided."
    ),
    test: HarmTest | None = typer.Option(None, "--test", help="harm rule: permutation (default) or sign."),
    min_effect: float | None = typer.Option(None, "--min-effect", help="Practical threshold (0.05 = 5%)."),
    by: float | None = typer.Option(
        None, "--by", help="all_blocks_by / mean_by: the threshold (0.05 = 5%, or in the metric's unit)."
    ),
    unit: UnitName | None = typer.Option(None, "--unit", help="all_blocks_by / mean_by: relative or metric."),
    margin: float | None = typer.Option(
        None, "--margin", help="harm rule: a non-inferiority margin the verdict states (in the data's units)."
    ),
    campaign: Path = typer.Option(Path("."), "--campaign", "-c", help="Campaign folder (with DESIGN_ID)."),
    force: bool = typer.Option(
        False, "--force", help="Analyze although the campaign fails verification (needs --why)."
    ),
    why: str | None = typer.Option(None, "--why", help="Why it is forced; recorded in the evidence chain."),
    as_json: bool = typer.Option(
        False,
        "--json",
        help="Print everything as one JSON object (schema frank.analysis, or frank.verdict with --blocks; "
        "docs/exports.md).",
    ),
) -> None:
    """Per-block table, exact p and verdict of a registered design, or of block values measured elsewhere.

    Example: frank analyze --blocks blocks.csv --rule sign --direction lower
    """
    if design_id is not None:
        if blocks is not None:
            raise typer.BadParameter("give a DESIGN_ID or --blocks, not both")
        if any(v is not None for v in (rule, direction, alpha, side, test, min_effect, by, unit, margin)):
            raise typer.BadParameter(
                "a registered design is analysed under its registered rule; "
                "--rule, --direction, --alpha, --side, --test, --min-effect, --by, --unit and --margin go with --blocks"
            )
        from frankenstein.campaign import open_campaign
        from frankenstein.design.analysis import analyze_evidence, format_analysis
        from frankenstein.design.facts import design_facts, fresh_start_lines
        from frankenstein.design.kinds.base import Evidence
        from frankenstein.design.percentiles import arm_percentiles
        from frankenstein.design.registry import get
        from frankenstein.report.export import analysis_doc, dumps
        from frankenstein.report.phases import time_lines

        with open_campaign(campaign) as c:
            verified_or_warn(c, "analyze", force=force, why=why)
            ev = Evidence.read(c, get(c, design_id))  # the design's starts, read once for all it prints
            a = analyze_evidence(c, ev)
            latency = arm_percentiles(c.store, ev.starts)
            facts = design_facts(c, ev)
        if as_json:
            typer.echo(dumps(analysis_doc(a, latency, facts.not_fresh)), nl=False)
            return
        lines = format_analysis(a, latency) + time_lines(a.time_spent)  # + where the time went
        _echo_lines(lines + [f"note: {line}" for line in fresh_start_lines(facts)])
        return
    if blocks is None or rule is None or direction is None:
        raise typer.BadParameter("without a DESIGN_ID, --blocks, --rule and --direction are required")
    from frankenstein.design.blockcsv import analyze_blocks_file
    from frankenstein.design.rules import parse_rule
    from frankenstein.design.table import format_verdict

    r = parse_rule(
        rule.value,
        alpha=0.05 if alpha is None else alpha,
        side=side.value if side else None,
        min_effect=min_effect,
        test=test.value if test else None,
        by=by,
        unit=unit.value if unit else None,
        margin=margin,
    )
    verdict = analyze_blocks_file(blocks, r, direction.value)
    if as_json:
        from frankenstein.report.export import dumps, verdict_doc

        typer.echo(dumps(verdict_doc(verdict, str(blocks))), nl=False)
        return
    _echo_lines(format_verdict(verdict))


@app.command()
def plan(
    design: Path | None = typer.Argument(
        None, help="A design file to plan before registration (with --pilot DESIGN_ID or --run-pilot, and -c CAMPAIGN)."
    ),
    budget: str | None = typer.Option(None, "--budget", help="With a design file: the wall time to spend (2h, 30m)."),
    effect: float | None = typer.Option(None, "--effect", help="Effect to detect: 0.05 = 5% better for the candidate."),
    direction: DirectionName | None = typer.Option(
        None, "--direction", help="Which way is better for the candidate (with --effect)."
    ),
    harm: float | None = typer.Option(
        None, "--harm", help="Or: the loss a harm design must exclude (per block, e.g. passes per start)."
    ),
    pilot: Path | None = typer.Option(
        None, "--pilot", help="A/A pilot CSV: block,served,candidate; with a design file: a pilot design's id."
    ),
    sd: float | None = typer.Option(None, "--sd", help="Or: the sd of the block log ratio."),
    rule: list[PlanRuleName] = typer.Option(
        [], "--rule", help="Rules to plan (repeatable; default: all_blocks_better, sign, permutation)."
    ),
    alpha: float = typer.Option(0.05, "--alpha", help="Significance level."),
    power: float = typer.Option(0.8, "--power", help="Target power."),
    max_blocks: int = typer.Option(40, "--max-blocks", help="The most blocks to consider."),
    simulations: int = typer.Option(2000, "--simulations", help="Simulated designs per block count (permutation)."),
    seed: int = typer.Option(1, "--seed", help="Seed of the simulations."),
    timing_from: str | None = typer.Option(
        None, "--timing-from", help="A design whose recorded phases estimate the wall time (with --campaign)."
    ),
    campaign: Path = typer.Option(Path("."), "--campaign", "-c", help="Campaign folder of --timing-from."),
    blocks: int | None = typer.Option(None, "--blocks", help="Estimate the wall time at this many blocks."),
    run_pilot: bool = typer.Option(
        False,
        "--run-pilot",
        help="With a design file: register and run an A/A pilot of its served arm first, and plan from it "
        "(a finished pilot of the same recipe and workload is reused).",
    ),
    pilot_blocks: int | None = typer.Option(
        None, "--pilot-blocks", min=2, max=1000, help="Blocks of the --run-pilot pilot (default 3)."
    ),
    fresh_pilot: bool = typer.Option(
        False, "--fresh-pilot", help="With --run-pilot: run a new pilot even where a finished one would be reused."
    ),
) -> None:
    """How many blocks a rule needs to detect an effect, from an A/A pilot's spread or a given sd; with
    --harm, how many an agent (difference) design needs to exclude a loss of that size.

    Example: frank plan --pilot aa.csv --effect 0.05 --direction lower
    Example: frank plan --harm 1 --sd 1.6   (exclude a loss of more than 1 pass per start)
    Example: frank plan designs/x.toml --budget 30m --pilot aa-1 --effect 0.02
    Example: frank plan designs/x.toml --budget 30m --run-pilot -c my-campaign
    """
    if run_pilot and pilot is not None:
        raise typer.BadParameter(
            "--run-pilot runs a new A/A pilot and --pilot names one already run: give one of them",
            param_hint="--pilot",
        )
    if not run_pilot and (pilot_blocks is not None or fresh_pilot):
        raise typer.BadParameter("--pilot-blocks and --fresh-pilot go with --run-pilot", param_hint="--run-pilot")
    if design is not None:
        now = (pilot_blocks or 3, fresh_pilot) if run_pilot else None
        _plan_design(design, budget, pilot, campaign, effect, sd, power, now)
        return
    if budget is not None or run_pilot:
        flag = "--budget" if budget is not None else "--run-pilot"
        raise typer.BadParameter(f"{flag} plans a design file: give DESIGN.toml")
    from frankenstein.design.plan import harm_plan_from_options, plan_from_options
    from frankenstein.design.table import format_harm_plan, format_plan

    for name, value in (("--effect", effect), ("--harm", harm), ("--sd", sd), ("--alpha", alpha), ("--power", power)):
        if value is not None and not math.isfinite(value):
            raise typer.BadParameter(f"{value} is not a finite number", param_hint=name)
    if not 1 <= simulations <= 100_000:
        raise typer.BadParameter("between 1 and 100000", param_hint="--simulations")
    if harm is not None:
        if effect is not None or direction is not None or rule or timing_from is not None:
            raise typer.BadParameter(
                "--harm plans the harm rule on per-block differences: no --effect, --direction, --rule or --timing-from"
            )
        hp = harm_plan_from_options(
            harm=harm,
            pilot=pilot,
            sd=sd,
            alpha=alpha,
            target=power,
            max_blocks=max_blocks,
            simulations=simulations,
            seed=seed,
        )
        _echo_lines(format_harm_plan(hp, str(pilot) if pilot else None))
        return
    if effect is None or direction is None:
        raise typer.BadParameter("--effect and --direction are required (or --harm)")
    kinds = [r.value for r in rule] or ["all_blocks_better", "sign", "permutation"]
    result = plan_from_options(
        kinds,
        pilot=pilot,
        sd=sd,
        effect=effect,
        direction=direction.value,
        alpha=alpha,
        target=power,
        max_blocks=max_blocks,
        simulations=simulations,
        seed=seed,
    )
    lines = format_plan(result, str(pilot) if pilot else None)
    if timing_from is not None:
        from frankenstein.design.walltime import estimate_lines

        lines += estimate_lines(campaign, timing_from, result, blocks)
    _echo_lines(lines)


def _plan_design(
    design: Path, budget: str | None, pilot: Path | None, campaign_dir: Path, effect: float | None, sd: float | None,
    target: float, run_pilot: tuple[int, bool] | None,
) -> None:  # fmt: skip
    """``frank plan DESIGN.toml``: the design file's blocks, power, wall time and what the budget can detect;
    ``run_pilot`` (blocks, fresh): from an A/A pilot run now."""
    from frankenstein.campaign import open_campaign
    from frankenstein.design.budget import budget_lines, budget_plan, parse_budget

    if pilot is None and run_pilot is None:
        raise typer.BadParameter(
            "a design file is planned from a pilot design: --pilot DESIGN_ID, or --run-pilot to run one now",
            param_hint="--pilot",
        )
    budget_s = parse_budget(budget) if budget is not None else None
    with open_campaign(campaign_dir) as c:
        pilot_id = str(pilot) if run_pilot is None else _pilot_now(c, design, *run_pilot)
        p = budget_plan(c, design, pilot_id, effect=effect or 0.05, budget_s=budget_s, sd=sd, target=target)
    _echo_lines(budget_lines(p))


def _pilot_now(c: Campaign, design: Path, blocks: int, fresh: bool) -> str:
    """``--run-pilot``: the design's A/A pilot, registered and run (progress and start lines on stderr) or
    reused; one line on stdout says which."""
    from frankenstein.design.aapilot import pilot_line, prepare_pilot, run_pilot
    from frankenstein.progress import RunProgress, heartbeat_seconds

    verified_or_warn(c, "plan --run-pilot", force=False, why=None)
    ready = prepare_pilot(c, design, blocks=blocks, fresh=fresh)
    with RunProgress(len(ready.todo), heartbeat_s=heartbeat_seconds(None), prefix="frank plan") as progress:
        done = run_pilot(c, ready, echo=lambda s: typer.echo(s, err=True), progress_factory=progress.slot)
    typer.echo(pilot_line(done))
    return done.design_id
