"""A noise guard that knows the design (#32 item 3): the arm's own engine threads are expected load, not a
busy machine; fidelity and memory designs (numbers that do not depend on time) are not warned; many busy
starts make one warning naming blocks and arms, wrapped. Real store rows (registry + insert_start)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from frankenstein.design.analysis import analyze, format_analysis
from frankenstein.design.kinds import timed
from frankenstein.design.start import WARNING_WIDTH, load_warnings, own_threads
from frankenstein.engines import traits_of
from frankenstein.measure.noise import LoadRecord, judge_load

from helpers_campaign import make_campaign, make_workload
from helpers_ledger import CONFIRMED, NO_GPU, stored_design


def load(runnable_mean: float, cores: int = 2) -> dict[str, Any]:
    """A start's load as LoadSampler records it."""
    return LoadRecord(
        cores=cores,
        wall_s=4.0,
        samples=20,
        runnable_mean=runnable_mean,
        runnable_max=int(runnable_mean) + 1,
        loadavg_before=(0.5, 0.5, 0.5),
        loadavg_after=(min(runnable_mean, 1.0), 0.5, 0.5),
    ).model_dump(mode="json")


@pytest.fixture
def camp(tmp_path: Path):
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl")
    yield c
    c.close()


def test_the_arms_own_threads_are_expected_load() -> None:
    rec = LoadRecord.model_validate(load(3.0))
    assert judge_load("start 1", rec) is not None  # 3 runnable on 2 cores, nothing known of the arm
    assert judge_load("start 1", rec, own_threads=2) is None  # --threads 2 on 2 cores: its own load
    hot = LoadRecord.model_validate(load(4.5))
    assert judge_load("start 1", hot, own_threads=2) == (
        "start 1: the machine was busier than its 2 cores and the arm's own 2 engine threads during this start "
        "(run queue mean 4.5, max 5; 1-min load average 0.50 → 1.00); its timings may include waiting for a CPU"
    )


def test_threads_read_from_the_launch_args() -> None:
    t = traits_of("llamacpp")
    assert t.threads(["-m", "x.gguf", "--threads", "1", "--port", "{port}"]) == 1
    assert t.threads(["--threads", "1", "-t", "2"]) == 2  # the last one wins, as in llama.cpp
    assert t.threads(["--threads=3"]) == 3
    assert t.threads(["--threads", "-1"]) == 0 and t.threads(["--threads"]) == 0 and t.threads([]) == 0
    assert traits_of("no-such-engine").threads(["--threads", "4"]) == 0


def busy_rows(camp, name: str, runnable: float, threads: list[str]) -> list:
    reg = stored_design(
        camp,
        name=name,
        served=CONFIRMED[0],
        candidate=CONFIRMED[1],
        resources=lambda a, b: {**NO_GPU, "load": load(runnable)},
    )
    rows = camp.store.starts_of(reg.design_id)
    return [dataclasses.replace(r, recipe={"args": ["-m", "m.gguf", *threads]}) for r in rows]


def test_a_candidate_using_every_core_is_not_a_busy_machine(camp) -> None:
    assert load_warnings(busy_rows(camp, "own", 3.0, ["--threads", "2"])) == []
    assert len(load_warnings(busy_rows(camp, "own2", 3.5, ["--threads", "1"]), each=20)) == 12


def test_many_busy_starts_name_blocks_and_arms_wrapped(camp) -> None:
    rows = busy_rows(camp, "many", 3.0, [])
    (warning,) = load_warnings(rows)
    lines = warning.splitlines()
    assert len(lines) > 1 and all(len(line) <= WARNING_WIDTH for line in lines)
    assert all(line.startswith("  ") for line in lines[1:])
    flat = " ".join(warning.split())
    assert re.match(  # the arms in start order: the registered random order of each block
        r"12 of 12 starts ran while the machine was busier than its cores: block 1 \((served, candidate|candidate, "
        r"served)\), block 2 \(",
        flat,
    ), flat
    assert "block 6 (" in flat and "; the busiest: start " in flat
    shown = format_analysis(analyze(camp, rows[0].design_id))
    first = next(i for i, x in enumerate(shown) if x.startswith("warning: 12 of 12 starts"))
    assert shown[first + 1].startswith("  ")  # printed wrapped, continuation indented


def test_own_threads_of_a_row(camp) -> None:
    rows = busy_rows(camp, "t", 3.0, ["-t", "2"])
    assert {own_threads(r) for r in rows} == {2}
    assert own_threads(dataclasses.replace(rows[0], recipe=None)) == 0  # a command arm: nothing known


def test_fidelity_and_memory_designs_are_not_warned(camp) -> None:
    rows = busy_rows(camp, "fid", 9.0, [])
    assert timed("speed") and timed("agent") and not timed("fidelity") and not timed("memory")
    assert load_warnings(rows, timed=False) == [] and load_warnings(rows) != []
