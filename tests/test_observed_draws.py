"""Agent draws outside designs: ``frank tasks draw --campaign`` keeps each draw's outcome under the ledger
step served, and the note summarises them per step as observations ("N draws since, ... no engine or episode
error"). The real CLI (in-process), the real agent loop, sandbox and grader, driven by the scripted model
server (the agent tests' TEST DOUBLE for a model: no model here can solve a task)."""

from __future__ import annotations

from pathlib import Path

import pytest

from frankenstein import ledger
from frankenstein.agent.scripted import ScriptedModelServer, Step, call, write_task
from frankenstein.campaign import open_campaign
from frankenstein.report import write_report

from helpers_campaign import make_campaign, make_workload
from helpers_cli import cli
from helpers_ledger import CONFIRMED, stored_design

PASSING = [call("write_file", path="answer.txt", content="42"), call("submit")]
ENGINE_FAILS = [call("bash", command="true"), Step(status=500, error_body="boom")]


def draw(capsys: pytest.CaptureFixture[str], tmp: Path, camp: Path, n: int, steps: list[Step]) -> str:
    with ScriptedModelServer(steps) as srv:
        code, out, err = cli(
            capsys, "tasks", "draw", srv.base_url, "--trace", str(tmp / f"t{n}.jsonl"), "--work-dir",
            str(tmp / f"w{n}"), "--suite", str(tmp / "suite"), "--draw", str(n), "-c", str(camp),
        )  # fmt: skip
    assert code == 0, err
    return err


def test_draws_are_kept_per_ledger_step_and_summarised_in_the_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_task(tmp_path / "suite", "t42")
    camp = make_campaign(tmp_path / "c")
    make_workload(camp.root / "workloads" / "w.jsonl")
    reg = stored_design(camp, name="draft-speed", served=CONFIRMED[0], candidate=CONFIRMED[1])
    camp.close()
    assert "under the base recipe (observational)" in draw(capsys, tmp_path, tmp_path / "c", 0, PASSING)
    with open_campaign(tmp_path / "c") as c:
        ledger.adopt(c, "draft", reg.design_id)
    for n in (1, 2):
        assert "under ledger step 1 (observational)" in draw(capsys, tmp_path, tmp_path / "c", n, PASSING)
    draw(capsys, tmp_path, tmp_path / "c", 3, ENGINE_FAILS)
    with open_campaign(tmp_path / "c") as c:
        rows = c.store.observed_draws()
        assert [(d.step, d.draw, d.episodes, d.passed, d.engine_errors) for d in rows] == [
            (None, 0, 1, 1, 0),
            (1, 1, 1, 1, 0),
            (1, 2, 1, 1, 0),
            (1, 3, 1, 0, 1),
        ]
        text = write_report(c, tmp_path / "out").read_text()
    section = text.split("## Agent draws outside designs (observational)", 1)[1]
    assert "different occasions, not a controlled comparison" in section
    assert "- Under the base recipe: 1 draw(s), 1 episodes, 1 passed; no engine or episode error." in section
    assert (
        "- Under step 1 (adopt `draft`): 3 draw(s), 3 episodes, 2 passed; 1 engine error(s), 0 other episode error(s)."
        in section
    )
    assert "| step 1 (adopt `draft`) | 3 | 3 | 2 | 1 | 0 |" in section


def test_a_draw_for_a_missing_campaign_is_refused_before_it_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_task(tmp_path / "suite", "t42")
    with ScriptedModelServer(PASSING) as srv:
        code, _, err = cli(
            capsys, "tasks", "draw", srv.base_url, "--trace", str(tmp_path / "t.jsonl"), "--work-dir",
            str(tmp_path / "w"), "--suite", str(tmp_path / "suite"), "-c", str(tmp_path / "nowhere"),
        )  # fmt: skip
        assert srv.steps_left == len(PASSING)  # nothing was asked of the model
    assert code != 0 and "nowhere" in err and "Traceback" not in err
    assert not (tmp_path / "t.jsonl").exists()
