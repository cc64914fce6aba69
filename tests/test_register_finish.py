"""Registration refuses designs that cannot finish (issue #16 item 2), through the real ``frank`` entry
point: a missing draft model file, warm-up turns covering the whole replayed workload, and agent
designs whose suite, tasks, limits or draws no start could finish. Each refusal is one line naming the
design file and the field, and nothing is registered; a valid design still registers."""

from __future__ import annotations

from pathlib import Path

import pytest

from frankenstein.campaign import open_campaign

from helpers_campaign import TOML, make_campaign, make_workload, write_design
from test_names import cli

AGENT = """\
name = "{name}"
kind = "agent"
hypothesis = "the draft part does not lose passes"
blocks = 5
primary_metric = "passes"

[arms.served]
recipe = "served"

[arms.candidate]
recipe = "served"
parts = ["draft"]

[rule]
kind = "harm"
alpha = 0.05

[agent]
{agent}
"""

PART = """
[parts.{name}]
description = "a draft model that is not there"
args = [{args}]
"""


@pytest.fixture
def camp(tmp_path: Path) -> Path:
    toml = TOML
    for name, args in [
        ("gone-md", '"-md", "/nonexistent/draft.gguf"'),
        ("gone-long", '"--model-draft", "/nonexistent/draft.gguf"'),
        ("gone-eq", '"--model-draft=/nonexistent/draft.gguf"'),
        ("gone-pkg", '"-md", "pkg:no-such-draft.gguf"'),
        ("gone-rel", '"-md", "nonexistent-dir/draft.gguf"'),
    ]:
        toml += PART.format(name=name, args=args)
    c = make_campaign(tmp_path / "c", toml=toml)
    make_workload(c.root / "workloads" / "w.jsonl", turns=6)
    c.close()
    return c.root


def refused(capsys, camp: Path, design: Path, field: str) -> str:
    code, out, err = cli(capsys, "register", str(design), "-c", str(camp))
    lines = err.strip().splitlines()
    assert code == 1, (code, out, err)
    assert len(lines) == 1, err
    assert lines[0].startswith(f"frank: error: {design}: {field}: "), lines[0]
    c = open_campaign(camp)
    try:
        assert c.store.registry_rows() == []
    finally:
        c.close()
    return lines[0]


@pytest.mark.parametrize("part", ["gone-md", "gone-long", "gone-eq", "gone-pkg", "gone-rel"])
def test_a_missing_draft_model_file_is_refused(camp: Path, capsys, part: str) -> None:
    design = write_design(camp / "d.toml", candidate_parts=f'["{part}"]')
    line = refused(capsys, camp, design, "arms.candidate")
    assert "draft model file" in line and "does not exist" in line, line


def test_a_draft_flag_without_a_file_is_refused(tmp_path: Path, capsys) -> None:
    c = make_campaign(tmp_path / "c", toml=TOML + PART.format(name="empty", args='"-md"'))
    make_workload(c.root / "workloads" / "w.jsonl")
    c.close()
    design = write_design(c.root / "d.toml", candidate_parts='["empty"]')
    assert "names no draft model file" in refused(capsys, c.root, design, "arms.candidate")


@pytest.mark.parametrize(
    "replay",
    [
        "warmup_turns = 100",  # longer than the 6-turn workload
        "warmup_turns = 6",  # exactly the workload: nothing left to measure
        "warmup_turns = 4\nmax_turns = 4",  # max_turns caps the replay (already refused by the model)
    ],
)
def test_warmup_covering_every_replayed_turn_is_refused(camp: Path, capsys, replay: str) -> None:
    design = write_design(camp / "d.toml")
    design.write_text(design.read_text().replace("warmup_turns = 1", replay))
    line = refused(capsys, camp, design, "replay.warmup_turns")
    assert "measured turn" in line, line


def test_warmup_below_max_turns_but_over_the_workload_is_refused(camp: Path, capsys) -> None:
    design = write_design(camp / "d.toml")
    design.write_text(design.read_text().replace("warmup_turns = 1", "warmup_turns = 8\nmax_turns = 20"))
    assert "of the 6 turns replayed" in refused(capsys, camp, design, "replay.warmup_turns")


@pytest.mark.parametrize(
    ("agent", "field", "words"),
    [
        ('suite = "/nonexistent"', "agent.suite", "not a folder"),
        ('tasks = ["nosuch"]', "agent.tasks", "unknown task id(s) nosuch"),
        ("tasks = []", "agent.tasks", "names no task"),
        ("limits = { bogus = 4 }", "agent.limits.bogus", "unknown limit 'bogus' (known: "),
        ("limits = { turns = 1.5 }", "agent.limits.turns", "task "),
        ("limits = { context_tokens = 8 }", "agent.limits.context_tokens", "task "),
        ("draws = 100000000", "agent.draws", "more than the 100"),
    ],
)
def test_an_agent_design_that_cannot_finish_is_refused(camp: Path, capsys, agent: str, field: str, words: str) -> None:
    design = camp / "agent.toml"
    design.write_text(AGENT.format(name="agent-bad", agent=agent))
    assert words in refused(capsys, camp, design, field)


def test_an_empty_suite_folder_is_refused(camp: Path, tmp_path: Path, capsys) -> None:
    (tmp_path / "empty-suite").mkdir()
    design = camp / "agent.toml"
    design.write_text(AGENT.format(name="agent-bad", agent=f'suite = "{tmp_path / "empty-suite"}"'))
    assert "no task folders" in refused(capsys, camp, design, "agent.suite")


def test_valid_designs_still_register(camp: Path, capsys) -> None:
    speed = write_design(camp / "d.toml", candidate_parts='["draft"]')
    speed.write_text(speed.read_text().replace("warmup_turns = 1", "warmup_turns = 5"))
    code, out, err = cli(capsys, "register", str(speed), "-c", str(camp))
    assert code == 0, err
    agent = camp / "agent.toml"
    agent.write_text(
        AGENT.format(
            name="agent-ok",
            agent='tasks = ["spec-durations"]\ndraws = 100\nlimits = { turns = 1, output_tokens = 16 }',
        )
    )
    code, out, err = cli(capsys, "register", str(agent), "-c", str(camp))
    assert code == 0, err
    c = open_campaign(camp)
    try:
        assert len(c.store.registry_rows()) == 2
    finally:
        c.close()


def test_an_engine_the_adapter_table_lacks_is_refused_naming_the_arm(tmp_path: Path, capsys) -> None:
    """An engine is one adapter module plus one line in engines.ADAPTERS: frank.toml takes any engine name, and
    registration refuses one the table lacks (a typo, or an adapter not installed)."""
    toml = TOML + '\n[recipes.other]\nengine = "trtllm"\nmodel = "pkg:tiny-target.gguf"\n'
    c = make_campaign(tmp_path / "c", toml=toml)
    make_workload(c.root / "workloads" / "w.jsonl", turns=6)
    c.close()
    design = write_design(c.root / "d.toml", candidate_parts="[]")
    text = design.read_text()
    head, tail = text.split("[arms.candidate]\n", 1)
    design.write_text(head + "[arms.candidate]\n" + tail.replace('recipe = "served"', 'recipe = "other"', 1))
    assert 'recipe = "other"' in design.read_text()
    line = refused(capsys, c.root, design, "arms.candidate")
    assert "unknown engine 'trtllm' (known: llamacpp, vllm, sglang, openai, external)" in line, line
