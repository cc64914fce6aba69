"""``frank plan --timing-from``: the wall time of a llama.cpp design estimated from the phases of a
3-block pilot, checked against the real run of that design (4 blocks) on the real llama-server, once
through the library (``wall_time`` against ``run_design``) and once through the real CLI end to end
(``frank plan`` prints the estimate, ``frank run`` is timed around its process); the errors are printed
and bounded. Bad input to the option is one message, no traceback."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from conftest import frank
from frankenstein.campaign import open_campaign
from frankenstein.design.timespent import summarize
from frankenstein.design.plan import wall_time
from frankenstein.design.registry import register
from frankenstein.design.runner import run_design
from helpers_campaign import make_campaign, make_workload, write_design

pytestmark = pytest.mark.engine

MAX_ERROR = 0.5  # a shared two-core machine: starts of a second vary by tens of percent
CLI_MAX_ERROR = 0.5
"""The CLI's estimate against ``frank run``'s process wall time: the same noise, plus the process's own
start (Python, imports, opening the campaign), which the estimate from stored phases does not contain."""


def _design(root: Path, name: str, blocks: int) -> Path:
    p = write_design(root / f"{name}.toml", name=name, blocks=blocks)
    p.write_text(p.read_text().replace("alpha = 0.05", "alpha = 0.5"))
    return p


@pytest.fixture(scope="module")
def camp(tmp_path_factory: pytest.TempPathFactory, llama_server_bin: str) -> Path:
    c = make_campaign(tmp_path_factory.mktemp("wall") / "c")
    make_workload(c.root / "workloads" / "w.jsonl", turns=4, tokens=64)
    reg = register(c, _design(c.root, "pilot", 3))
    run_design(c, reg.design_id, echo=lambda s: None)
    c.close()
    return c.root


def test_the_estimate_matches_the_real_run(camp: Path) -> None:
    with open_campaign(camp) as c:
        estimate = wall_time(summarize(c.store.starts_of("pilot-1")), 4)
        reg = register(c, _design(c.root, "real", 4))
        t0 = time.monotonic()
        run_design(c, reg.design_id, echo=lambda s: None)
        actual = time.monotonic() - t0
        recorded = summarize(c.store.starts_of(reg.design_id))
    error = (estimate.seconds - actual) / actual
    print(f"estimate {estimate.seconds:.2f} s, real run {actual:.2f} s, error {error:+.1%}")
    assert estimate.starts == 8 == recorded.starts
    assert abs(error) < MAX_ERROR
    assert 0 < estimate.engine_share < 1
    assert recorded.wall_s == pytest.approx(actual, rel=0.15)  # the phases account for the run's wall time


def test_frank_plan_prints_the_wall_time_and_the_curtailed_expectation(camp: Path) -> None:
    r = frank(
        "plan", "--sd", "0.05", "--effect", "0.1", "--direction", "lower", "--rule", "sign",
        "--timing-from", "pilot-1", "-c", str(camp), "--blocks", "10",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = r.stdout[r.stdout.index("wall time, from the phases of design pilot-1 (6 starts") :].splitlines()
    assert lines[1].startswith("  sign: 10 blocks × 2 arms: about ") and lines[1].endswith("% of it engine starts")
    assert lines[2].startswith('    curtailed (stopping = "curtail"): ')
    assert "of 10 blocks expected" in lines[2] and "at no effect" in lines[2]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--timing-from", "nope-1"], "--timing-from: no design nope-1 in campaign"),
        (["--timing-from", "pilot-1", "--blocks", "0"], "--blocks must be 1..1000, got 0"),
    ],
)
def test_bad_timing_options_are_one_message(camp: Path, args: list[str], message: str) -> None:
    r = frank("plan", "--sd", "0.05", "--effect", "0.1", "--direction", "lower", "-c", str(camp), *args)
    assert r.returncode != 0 and message in r.stderr and "Traceback" not in r.stderr


def seconds_of(text: str) -> float:
    """The seconds of ``timespent.duration``'s words: '3 h 20 min', '4 min 10 s', '12.3 s'."""
    units = {"h": 3600.0, "min": 60.0, "s": 1.0}
    words = text.split()
    return sum(float(n) * units[u] for n, u in zip(words[::2], words[1::2]))


def test_frank_plans_estimate_against_frank_run_timed_around_the_cli(camp: Path) -> None:
    r = frank(
        "plan", "--sd", "0.05", "--effect", "0.1", "--direction", "lower", "--rule", "sign",
        "--timing-from", "pilot-1", "-c", str(camp), "--blocks", "4",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("  sign: 4 blocks × 2 arms: about "))
    estimate = seconds_of(line.split("about ", 1)[1].split(",")[0])
    assert frank("register", str(_design(camp, "cli", 4)), "-c", str(camp)).returncode == 0
    t0 = time.monotonic()
    r = frank("run", "cli-1", "-c", str(camp))
    actual = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    with open_campaign(camp) as c:
        rows = c.store.starts_of("cli-1")
    assert len(rows) == 8 and all(row.ok for row in rows)
    error = (estimate - actual) / actual
    print(f"\nfrank plan: {line.strip()}\nfrank run cli-1: {actual:.2f} s (process wall time); error {error:+.1%}")
    assert abs(error) < CLI_MAX_ERROR, (estimate, actual)
