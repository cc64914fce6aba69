"""Curtailment end to end with command arms (real subprocesses, real store): a kind that cannot
curtail refuses ``stopping = "curtail"`` at registration; a 10-block all_blocks_better design whose
candidate wins every block ends "confirmed"; a dropped block is neither analysed nor remaining."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from frankenstein.design.analysis import analyze, format_analysis
from frankenstein.design.registry import register
from frankenstein.design.runner import run_design
from frankenstein.errors import DesignError

from helpers_campaign import make_campaign

# value, counter file, call number that fails (0: never); prints the metric as JSON
BENCH = """\
import json, sys
from pathlib import Path
metric, value, counter, fail_on = sys.argv[1], float(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
n = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(n))
if n == fail_on:
    sys.exit("failing on purpose: call %d" % n)
print(json.dumps({metric: value}))
"""

SPEED = """\
name = "{name}"
kind = "{kind}"
hypothesis = "the candidate is better"
blocks = {blocks}
primary_metric = "{metric}"
stopping = "curtail"
failure_policy = "drop_block"

[arms.served]
command = ["{py}", "{bench}", "{metric}", "{served}", "{root}/served.n", "0"]

[arms.candidate]
command = ["{py}", "{bench}", "{metric}", "{candidate}", "{root}/candidate.n", "{fail_on}"]

[rule]
kind = "{rule}"
alpha = 0.05
"""


def _design(
    root: Path,
    *,
    name: str = "d",
    kind: str = "speed",
    blocks: int = 10,
    rule: str = "all_blocks_better",
    metric: str = "verify_step_ms",
    served: str = "2.0",
    candidate: str = "1.5",
    fail_on: int = 0,
) -> Path:
    bench = root / "bench.py"
    bench.write_text(BENCH)
    p = root / f"{name}.toml"
    p.write_text(
        SPEED.format(
            name=name,
            kind=kind,
            blocks=blocks,
            rule=rule,
            metric=metric,
            py=sys.executable,
            bench=bench,
            served=served,
            candidate=candidate,
            root=root,
            fail_on=fail_on,
        )
    )
    return p


def test_all_blocks_better_with_curtail_confirms_when_the_candidate_wins_every_block(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    reg = register(c, _design(c.root))
    lines: list[str] = []
    run_design(c, reg.design_id, echo=lines.append)
    assert not any(line.startswith("curtailed") for line in lines)  # one block against could still come
    a = analyze(c, reg.design_id)
    assert a.blocks_done == 10 and a.word == "confirmed"
    assert a.verdict is not None and a.verdict.p == pytest.approx(1 / 1024)


def test_an_agent_design_refuses_curtail_at_registration_naming_file_and_field(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    path = _design(
        c.root, name="agent", kind="agent", blocks=6, rule="harm", metric="passes", served="3", candidate="0"
    )
    with pytest.raises(
        DesignError, match=r"agent\.toml: stopping: stopping = \"curtail\" is not implemented for agent"
    ):
        register(c, path)
    assert "stopping" in c.store.refusals(None)[-1].reason  # the refusal is recorded


def test_an_agent_design_whose_candidate_passes_nothing_runs_to_a_verdict(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    path = _design(
        c.root, name="agent", kind="agent", blocks=6, rule="harm", metric="passes", served="3", candidate="0"
    )
    path.write_text(path.read_text().replace('stopping = "curtail"', 'stopping = "none"'))
    reg = register(c, path)
    run_design(c, reg.design_id, echo=lambda s: None)
    a = analyze(c, reg.design_id)
    assert a.blocks_done == 6 and a.word == "harm shown"


def test_the_cli_refuses_curtail_for_an_agent_design_in_one_line(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    path = _design(
        c.root, name="agent", kind="agent", blocks=6, rule="harm", metric="passes", served="3", candidate="0"
    )
    frank = Path(sys.executable).with_name("frank")
    p = subprocess.run(
        [str(frank), "register", str(path), "--campaign", str(c.root)], capture_output=True, text=True, timeout=120
    )
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert "agent.toml: stopping:" in p.stdout + p.stderr


def test_a_dropped_block_is_not_counted_as_remaining(tmp_path: Path) -> None:
    """Sign rule, 10 blocks, the candidate's 2nd start fails (block 2 dropped), every other block favours
    it. After 9 blocks (8 analysed, 1 dropped) one block remains and cannot undo 8 of 9: the runner stops,
    and the verdict says 8 analysed, 1 dropped, 1 not run — not "9 of 10"."""
    c = make_campaign(tmp_path / "c")
    reg = register(c, _design(c.root, rule="sign", fail_on=2))
    lines: list[str] = []
    run_design(c, reg.design_id, echo=lines.append)
    assert lines[-1] == "curtailed before block 10: the registered verdict can no longer change"
    rows = c.store.starts_of(reg.design_id)
    assert len(rows) == 18 and [(r.block, r.arm) for r in rows if not r.ok] == [(1, "candidate")]
    a = analyze(c, reg.design_id)
    assert a.word == "confirmed" and a.blocks_done == 8
    assert a.verdict is not None
    assert a.verdict.reason.startswith("curtailed after 8 of 10 blocks, 1 dropped, 1 not run: ")
    assert "note: block 2: candidate start failed" in "\n".join(format_analysis(a))
