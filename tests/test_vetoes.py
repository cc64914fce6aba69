"""Vetoes registered with a design (design/veto.py): a secondary metric with its own rule, checked on the same
starts as the primary. The campaign note's "768 slots" case through the real CLI with command arms (verify step
1.34 % lower in 5 of 5 blocks, time per output token lower in only 3 of 5: the veto fails, not adopted), and
``adopt`` refusing a confirmed design on its failed veto, naming it."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import jsonschema
import pytest

from conftest import frank
from frankenstein.design.registry import register
from frankenstein.design.veto import Veto, evaluate_veto
from frankenstein.shipped import data_path
from frankenstein.errors import DesignError, LedgerError
from frankenstein.ledger import adopt

from helpers_campaign import make_campaign, make_workload, write_design
from helpers_ledger import CONFIRMED, stored_design

# One start per call: the arm's next block's values from a list, counted in a state file of the arm.
BENCH = """\
import json, pathlib, sys
state = pathlib.Path(sys.argv[1].split("=", 1)[1])
n = int(state.read_text()) if state.exists() else 0
state.write_text(str(n + 1))
step, tpot = sys.argv[2].split(",")[n].split(":")
print("slots benchmark, block", n + 1)
print(json.dumps({"verify_step_ms": float(step), "decode_ms_per_token": float(tpot), "tokens_per_step": 2.5}))
"""

SLOTS = """\
name = "slots768"
kind = "speed"
hypothesis = "768 GPU slots for CPU experts shorten the verify step"
blocks = 5
primary_metric = "verify_step_ms"

[arms.served]
command = ["{py}", "{bench}", "state={root}/served.n", "{served}"]

[arms.candidate]
command = ["{py}", "{bench}", "state={root}/candidate.n", "{candidate}"]

[rule]
kind = "all_blocks_better"
alpha = 0.05

[[vetoes]]
metric = "decode_ms_per_token"
rule = "blocks_better"
at_least = 4

[[vetoes]]
metric = "tokens_per_step"
rule = "not_worse"
"""

STEP_SERVED = [15.620, 15.604, 15.633, 15.611, 15.628]
STEP_RATIO = [-0.0130, -0.0136, -0.0134, -0.0132, -0.0138]  # lower in 5 of 5, mean -1.34 %
TPOT_RATIO = [-0.020, -0.015, +0.003, -0.012, +0.004]  # lower in 3 of 5, mean -0.80 %


def _values(arm: str) -> str:
    if arm == "served":
        return ",".join(f"{s}:20.0" for s in STEP_SERVED)
    return ",".join(f"{s * (1 + r):.6f}:{20.0 * (1 + t):.6f}" for s, r, t in zip(STEP_SERVED, STEP_RATIO, TPOT_RATIO))


def _slots_design(root: Path) -> Path:
    bench = root / "slots_bench.py"
    bench.write_text(BENCH)
    p = root / "slots768.toml"
    p.write_text(
        SLOTS.format(
            py=sys.executable, bench=bench, root=root, served=_values("served"), candidate=_values("candidate")
        )
    )
    return p


def test_the_768_slots_case_confirmed_but_vetoed_through_the_cli(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    root = str(c.root)
    c.close()
    r = frank("register", str(_slots_design(c.root)), "-c", root)
    assert r.returncode == 0, r.stderr
    did = re.search(r"registered (\S+) ", r.stdout).group(1)  # type: ignore[union-attr]
    r = frank("run", did, "-c", root)
    assert r.returncode == 0, r.stderr

    r = frank("analyze", did, "-c", root)
    assert r.returncode == 0, r.stderr
    assert "geometric-mean ratio (candidate/served): 0.9866 (-1.34%)" in r.stdout
    assert "verdict: confirmed" in r.stdout
    assert (
        "  veto 'decode_ms_per_token lower in at least 4 of 5 blocks' failed: lower in 3 of 5 blocks, "
        "geometric-mean ratio 0.9920 (-0.80%)" in r.stdout.splitlines()
    )
    assert (
        "  veto 'tokens_per_step not lower (geometric mean)' passed: higher in 0 of 5 blocks, "
        "geometric-mean ratio 1.0000 (+0.00%)" in r.stdout.splitlines()
    )

    r = frank("analyze", did, "--json", "-c", root)
    doc = json.loads(r.stdout)
    schema = json.loads(data_path("schemas/analysis.schema.json").read_text())
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
    assert [(v["metric"], v["word"]) for v in doc["vetoes"]] == [
        ("decode_ms_per_token", "failed"),
        ("tokens_per_step", "passed"),
    ]

    out = tmp_path / "note"
    r = frank("report", "--out", str(out), "-c", root)
    assert r.returncode == 0, r.stderr
    note = (out / "note.md").read_text()
    didnt = note.split("## What didn't work", 1)[1]
    assert f"- `{did}` (speed, command arms): confirmed on its primary metric (" in didnt
    assert (
        "but its veto 'decode_ms_per_token lower in at least 4 of 5 blocks' failed: lower in 3 of 5 blocks, "
        "geometric-mean ratio 0.9920 (-0.80%). Not adopted." in didnt
    )
    assert "Vetoes (registered with the design, checked on the same starts" in note.split("## What didn't work")[0]


def _tpot(ratios: list[float]):
    """Start metrics adding decode_ms_per_token: served 20 ms, the candidate by ``ratios`` per block."""
    return lambda arm, b: {"decode_ms_per_token": 20.0 if arm == "served" else 20.0 * (1 + ratios[b])}


VETO = '[[vetoes]]\nmetric = "decode_ms_per_token"\nrule = "blocks_better"\nat_least = 6\n'


def test_adopt_refuses_a_confirmed_design_whose_veto_failed_naming_it(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl")
    tpot = [-0.02, -0.01, 0.01, -0.01, -0.02, -0.03]  # lower in 5 of 6
    stored_design(c, name="slots", served=CONFIRMED[0], candidate=CONFIRMED[1], extra=VETO, more=_tpot(tpot))
    root = str(c.root)
    c.close()
    r = frank("adopt", "draft", "--design", "slots-1", "-c", root)
    assert r.returncode == 1
    assert r.stderr.strip() == (
        "frank: error: refused: adopt 'draft' on design slots-1: its veto 'decode_ms_per_token lower in at least "
        "6 of 6 blocks' failed: lower in 5 of 6 blocks, geometric-mean ratio 0.9866 (-1.34%)"
    )
    r = frank("served", "-c", root)
    assert r.stdout.splitlines()[0] == "served: base"  # nothing adopted
    out = tmp_path / "note"
    assert frank("report", "--out", str(out), "-c", root).returncode == 0
    didnt = (out / "note.md").read_text().split("## What didn't work", 1)[1]
    assert "- adoption of `draft` on design `slots-1` refused: its veto 'decode_ms_per_token lower in" in didnt
    assert "- `slots-1` (speed, part `draft`): confirmed on its primary metric" in didnt


def test_a_passing_veto_lets_the_adoption_through_and_is_kept_in_its_scope(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl")
    stored_design(c, name="slots", served=CONFIRMED[0], candidate=CONFIRMED[1], extra=VETO, more=_tpot([-0.01] * 6))
    step = adopt(c, "draft", "slots-1")
    assert step.scope["vetoes"] == [
        "veto 'decode_ms_per_token lower in at least 6 of 6 blocks' passed: lower in 6 of 6 blocks, "
        "geometric-mean ratio 0.9900 (-1.00%)"
    ]


def test_a_veto_metric_no_start_reported_is_not_checked_and_refuses(tmp_path: Path) -> None:
    """Absent is never a pass: a veto whose metric no start reported stops the adoption."""
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl")
    stored_design(c, name="slots", served=CONFIRMED[0], candidate=CONFIRMED[1], extra=VETO)
    with pytest.raises(LedgerError, match=r"veto 'decode_ms_per_token lower in at least 6 of 6 blocks' not checked"):
        adopt(c, "draft", "slots-1")
    step = adopt(c, "draft", "slots-1", force=True, why="tpot was measured elsewhere")
    assert step.forced and "not checked" in step.scope["overridden"][0]


@pytest.mark.parametrize(
    ("veto", "field", "message"),
    [
        ('metric = "tpot"\nrule = "not_worse"', "vetoes[0].metric", "unknown metric 'tpot'"),
        ('metric = "tpot_ms"\nrule = "blocks_better"\nat_least = 6', "vetoes[0].at_least", "can never happen"),
        ('metric = "tpot_ms"\nrule = "blocks_better"', "vetoes.0", "needs at_least"),
        ('metric = "tpot_ms"\nrule = "not_worse"\nat_least = 2', "vetoes.0", "takes a tolerance"),
        ('metric = "tpot_ms"\nrule = "not_worse"\ntolerance = -0.1', "vetoes.0.tolerance", "greater than or equal"),
        ('metric = "tpot_ms"\nrule = "never"', "vetoes.0.rule", "not_worse"),
        ('metric = "tpot_ms"\nrule = "not_worse"\nwhy = 1', "vetoes.0.why", "unknown field"),
    ],
)
def test_bad_vetoes_are_refused_naming_file_and_field(tmp_path: Path, veto: str, field: str, message: str) -> None:
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl")
    p = write_design(c.root / "v.toml", extra=f"[[vetoes]]\n{veto}\n")
    with pytest.raises(DesignError) as exc:
        register(c, p)
    assert "v.toml" in str(exc.value) and field in str(exc.value) and message in str(exc.value), str(exc.value)
    assert not c.store.registry_rows()


def test_evaluate_veto_by_rule_and_direction() -> None:
    vals = {0: {"served": 10.0, "candidate": 9.0}, 1: {"served": 10.0, "candidate": 10.5}, 2: {"served": 10.0}}
    better = Veto(metric="verify_step_ms", rule="blocks_better", at_least=1)
    assert evaluate_veto(better, vals, "lower", 3).passed is True
    assert evaluate_veto(better.model_copy(update={"at_least": 2}), vals, "lower", 3).passed is False
    assert evaluate_veto(better, vals, "higher", 3).passed is True  # block 2 (10.5 > 10) is better when higher is
    worse = Veto(metric="tokens_per_step", rule="not_worse")
    # geometric mean sqrt(0.9 * 1.05) = 0.9721: better when lower, worse when higher is better
    assert evaluate_veto(worse, vals, "lower", 3).passed is True
    assert evaluate_veto(worse, vals, "higher", 3).passed is False
    assert evaluate_veto(worse.model_copy(update={"tolerance": 0.03}), vals, "higher", 3).passed is True
    none = evaluate_veto(worse, {0: {"served": 1.0}, 1: {"served": 0.0, "candidate": 0.0}}, "lower", 2)
    assert none.passed is None and none.word == "not checked"
