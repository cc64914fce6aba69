"""A/A fidelity designs (#32 item 8): the served recipe in both arms is allowed as kind "fidelity_aa" (a
plain fidelity design with identical arms is still refused, naming it), runs on the real llama-server and
reports the noise floor with its range over every start pair; it is never a fidelity gate."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import frank
from frankenstein.campaign import open_campaign
from frankenstein.gates import fidelity_gate_passed

from helpers_campaign import make_campaign, make_workload

pytestmark = pytest.mark.engine

DESIGN = """\
name = "noise"
kind = "{kind}"
hypothesis = "two starts of the served recipe on this machine differ by less than 0.02 nats"
blocks = 2
starts_per_arm = 1
workload = "workloads/wf.jsonl"

[arms.served]
recipe = "served"

[arms.candidate]
recipe = "served"

[rule]
kind = "fidelity"
tolerance = 0.02
threshold = 0.5
max_positions_above = 1

[fidelity]
top_k = 16
"""


def test_an_aa_fidelity_design_reports_the_noise_floor_over_start_pairs(tmp_path: Path, llama_server_bin: str) -> None:
    root = tmp_path / "c"
    make_campaign(root).close()
    make_workload(root / "workloads" / "w.jsonl", turns=2, tokens=8)
    filled = frank("fidelity", "fill", "served", "-w", str(root / "workloads" / "w.jsonl"),
                   "-o", str(root / "workloads" / "wf.jsonl"), "-c", str(root))  # fmt: skip
    assert filled.returncode == 0, filled.stderr
    (root / "plain.toml").write_text(DESIGN.format(kind="fidelity"))
    refused = frank("register", str(root / "plain.toml"), "-c", str(root))
    assert refused.returncode == 1 and "the two arms are identical" in refused.stderr
    assert '"fidelity_aa"' in refused.stderr and "Traceback" not in refused.stderr

    (root / "aa.toml").write_text(DESIGN.format(kind="fidelity_aa"))
    assert frank("register", str(root / "aa.toml"), "-c", str(root)).returncode == 0
    run = frank("run", "noise-1", "-c", str(root))
    assert run.returncode == 0, run.stderr
    a = frank("analyze", "noise-1", "-c", str(root))
    assert a.returncode == 0, a.stderr
    lines = a.stdout.splitlines()
    # 4 starts (2 blocks x 2 arms, all the served recipe): 6 pairs; llama.cpp on a CPU is deterministic: 0
    assert (
        "noise floor (A/A): mean KL 0 over 6 start pairs of 4 starts, range 0 (both arms are the served recipe)"
        in lines
    ), lines
    assert any(x.startswith("verdict: passed (") for x in lines), lines
    with open_campaign(root) as c:
        ok, why = fidelity_gate_passed(c, "noise-1", candidate_parts=[])
    assert not ok and why == "fidelity gate noise-1: an A/A fidelity design measures the noise floor and tested no part"
    adopt = frank("adopt", "anything", "-d", "noise-1", "-c", str(root))
    assert adopt.returncode == 1 and "Traceback" not in adopt.stderr
    report = frank("report", "-c", str(root), "-o", str(tmp_path / "out"))
    assert report.returncode == 0, report.stderr
    note = (tmp_path / "out" / "note.md").read_text()
    assert "It is an A/A fidelity design" in note and "noise floor (A/A): mean KL 0 over 6 start pairs" in note
