"""The note for fidelity and agent designs, and the fidelity gate in adopt, on real store rows.

Fidelity starts carry real ``topk.npz`` artifacts made with the fidelity module's own ``to_npz`` from
fixed top-k lists (no engine); agent starts carry rows in the ``episodes`` table. These sections are not
compared with golden files because the fidelity and agent analyses are owned and worded elsewhere; the
tests check what the note itself adds: the KL plot, the path measured, the pass matrix and its PNG.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from frankenstein import ledger
from frankenstein.fidelity import forced
from frankenstein.design.registry import register
from frankenstein.errors import LedgerError
from frankenstein.report import write_report
from frankenstein.report.plots import plot_kl, plot_paired_blocks, plot_pass_matrix
from frankenstein.shipped import data_path

from helpers_campaign import make_campaign, make_workload
from helpers_ledger import CONFIRMED, is_png, stored_design


FIDELITY_DESIGN = """\
name = "{name}"
kind = "fidelity"
hypothesis = "draft leaves next-token distributions within 0.05 nats"
blocks = 1
starts_per_arm = 2
workload = "workloads/w.jsonl"

[arms.served]
recipe = "served"

[arms.candidate]
recipe = "served"
parts = ["draft"]

[rule]
kind = "fidelity"
tolerance = 0.05
threshold = 0.5
max_positions_above = 1
"""

AGENT_DESIGN = """\
name = "agent-harm"
kind = "agent"
hypothesis = "draft loses no task passes"
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
"""


def valid_note_json(out: Path) -> dict:
    """note.json beside the note validates against its schema, and each design's analysis against its own."""
    doc = json.loads((out / "note.json").read_text())
    schema = lambda name: json.loads(data_path(f"schemas/{name}.schema.json").read_text())  # noqa: E731
    jsonschema.validate(doc, schema("note"), cls=jsonschema.Draft202012Validator)
    for d in doc["designs"]:
        if d["analysis"] is not None:
            jsonschema.validate(d["analysis"], schema("analysis"), cls=jsonschema.Draft202012Validator)
    return doc


@pytest.fixture
def camp(tmp_path: Path):
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl")
    yield c
    c.close()


def topk(shift: float) -> bytes:
    """Two turns of ten positions, top-4 lists; ``shift`` moves logit mass between the first two tokens."""
    p, k = 20, 4
    logits = np.array([2.0 + shift, 1.0 - shift, 0.0, -1.0])
    lps = (logits - math.log(np.exp(logits).sum())).astype(np.float32)
    result = forced.ForcedResult(
        path=forced.LLAMACPP_PATH,
        k_requested=k,
        k_used=k,
        turn_ids=["t0", "t1"],
        turn_sha=["a" * 8, "b" * 8],
        turn=np.repeat(np.arange(2, dtype=np.int32), 10),
        pos=np.tile(np.arange(10, dtype=np.int32), 2),
        token=np.zeros(p, np.int32),
        ids=np.tile(np.arange(k, dtype=np.int32), (p, 1)),
        logprobs=np.tile(lps, (p, 1)),
        n=np.full(p, k, np.int32),
        error=np.zeros(p, bool),
    )
    return forced.to_npz(result)


def stored_fidelity(camp, name: str, shift: float):
    path = camp.root / f"{name}.toml"
    path.write_text(FIDELITY_DESIGN.format(name=name))
    reg = register(camp, path)
    for pos, arm in enumerate(reg.schedule[0]):
        camp.store.insert_start(
            design_id=reg.design_id,
            block=0,
            position=pos,
            rep=sum(1 for a in reg.schedule[0][:pos] if a == arm),
            arm=arm,
            status="ok",
            started_at=f"2025-03-05T09:00:{pos:02d}.000Z",
            metrics={"positions": 20.0},
            engine="llamacpp",
            engine_version="b6000 (test build)",
            resources={"gpu": None},
            capabilities={"fidelity_path": forced.LLAMACPP_PATH},
            artifacts={"topk.npz": topk(shift if arm == "candidate" else 0.0)},
        )
    return reg


def test_fidelity_section_has_path_bound_and_kl_plot(camp, tmp_path: Path) -> None:
    reg = stored_fidelity(camp, "fid", 0.3)
    text = write_report(camp, tmp_path / "out").read_text()
    assert (
        f"- Fidelity path measured: {forced.LLAMACPP_PATH}; forced decode of the recorded continuations, top-64 "
        "logprobs requested; KL over the top-k union plus one tail bucket is a lower bound of the full-vocabulary KL."
        in text
    )
    assert f"![KL per position against the noise floor]({reg.design_id}-kl.png)" in text
    assert is_png(tmp_path / "out" / f"{reg.design_id}-kl.png")
    assert f"- design `{reg.design_id}` (fidelity, part `draft`): mean KL " in text
    assert "(top-k lower bound; noise floor 0)" in text
    [d] = valid_note_json(tmp_path / "out")["designs"]
    assert d["analysis"]["verdict"] is None and d["analysis"]["fidelity"]["word"] == d["word"]
    # fidelity starts force every turn: no warm-up turn is claimed for them
    assert "all turns per start, each forced (a fidelity start takes no warm-up turn)" in text
    assert "warm-up turn(s)" not in text


def test_adopt_checks_the_named_fidelity_gate(camp) -> None:
    bad = stored_fidelity(camp, "fid-wide", 3.0)  # far beyond the 0.05 nats tolerance
    reg = stored_design(
        camp, name="speed", served=CONFIRMED[0], candidate=CONFIRMED[1], extra=f'[gates]\nfidelity = "{bad.design_id}"'
    )
    with pytest.raises(LedgerError) as e:
        ledger.adopt(camp, "draft", reg.design_id)
    assert str(e.value).startswith(
        f"refused: adopt 'draft' on design speed-1: fidelity gate {bad.design_id}: failed (mean KL "
    )
    good = stored_fidelity(camp, "fid-close", 0.01)
    ok = stored_design(
        camp,
        name="speed2",
        served=CONFIRMED[0],
        candidate=CONFIRMED[1],
        extra=f'[gates]\nfidelity = "{good.design_id}"',
    )
    e2 = ledger.adopt(camp, "draft", ok.design_id)
    assert e2.scope["fidelity_gate"].startswith(f"fidelity gate {good.design_id}: passed (mean KL ")


def test_agent_design_pass_matrix_table_and_png(camp, tmp_path: Path) -> None:
    path = camp.root / "agent.toml"
    path.write_text(AGENT_DESIGN)
    reg = register(camp, path)
    tasks = ["fix-ledger-month", "log-incident"]
    for b, order in enumerate(reg.schedule):
        for pos, arm in enumerate(order):
            passed = {"fix-ledger-month": True, "log-incident": arm == "served" or b % 2 == 0}
            recorded = {"detail": {"sandbox": {"workspace_quota": "tmpfs 256 MB"}}} if b % 2 == 0 else {}
            eps = [
                {"task_id": t, "draw": 0, "task_hash": "h" * 8, "status": "submitted", "passed": passed[t], "turns": 3}
                | recorded
                for t in tasks
            ]
            camp.store.insert_start(
                design_id=reg.design_id,
                block=b,
                position=pos,
                arm=arm,
                status="ok",
                started_at=f"2025-03-06T09:{b:02d}:{pos:02d}.000Z",
                metrics={"passes": float(sum(passed.values()))},
                engine="llamacpp",
                engine_version="b6000 (test build)",
                episodes=eps,
            )
    text = write_report(camp, tmp_path / "out").read_text()
    assert "| task #draw | 1 S | 1 C | 2 S | 2 C | 3 S | 3 C | 4 S | 4 C | 5 S | 5 C |" in text
    assert "| fix-ledger-month #1 | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ |" in text
    assert "| log-incident #1 | ✓ | ✓ | ✓ | ✗ | ✓ | ✓ | ✓ | ✗ | ✓ | ✓ |" in text
    assert "- Tested one agent, one request at a time: it says nothing about concurrent serving." in text
    # what the passes rest on: the quota each episode recorded (older episodes recorded none)
    assert "workspace quota: not recorded (8 episodes); tmpfs 256 MB (12 episodes)\n" in text
    assert is_png(tmp_path / "out" / "agent-harm-1-passes.png")
    doc = valid_note_json(tmp_path / "out")
    # one verdict word for the design everywhere: summary, section, what didn't work, note.json
    assert doc["designs"][0]["word"] == "no harm shown"
    assert "verdict no harm shown; a harm check on task passes." in text
    assert "**It said:** no harm shown (" in text
    assert "not confirmed" not in text
    assert "- No harm shown is not equal quality: the harm rule did not fire" in text
    matrix = next(t for t in doc["tables"] if t["header"][0] == "task #draw")
    assert matrix["design_id"] == reg.design_id and matrix["rows"][1][4] == "✗"


def test_plots_write_valid_pngs(tmp_path: Path) -> None:
    a = plot_paired_blocks(
        tmp_path / "a.png", ["1", "2", "3"], [10.0, None, 9.0], [8.0, 8.5, None], "verify_step_ms", "t"
    )
    b = plot_kl(tmp_path / "b.png", [0.0, 1e-3, 0.02, 0.7], [0.0, 0.0, 1e-5], tolerance=0.05, threshold=0.5)
    c = plot_pass_matrix(tmp_path / "c.png", ["t #1", "u #1"], ["1 S", "1 C"], [[True, False], [None, True]])
    assert all(is_png(p) for p in (a, b, c))
    assert not is_png(Path(__file__))
