"""The machine in every record, and the noise guard, on real processes: every start (command arms here,
the same wrapper as every kind) records a machine snapshot, its load and an honest GPU status; a real
CPU burner (os.cpu_count() + 1 busy processes) running during one start makes ``analyze`` and the note
warn, naming that start; a start whose machine differs is flagged."""

from __future__ import annotations

import dataclasses
import re
import socket
import sys
from pathlib import Path

from frankenstein.design.analysis import analyze, format_analysis
from frankenstein.design.facts import read_resources
from frankenstein.design.registry import register
from frankenstein.design.runner import run_design
from frankenstein.design.start import load_warnings, machine_differences, start_label
from frankenstein.gates import memory_gate
from frankenstein.report.facts import resource_lines
from frankenstein.report.note import write_report

from helpers_campaign import make_campaign

# Sleeps ``seconds``; on the call numbered ``burn_on`` it runs cpu_count()+1 busy children meanwhile
# (each killed before it prints), so exactly that start runs on an overloaded machine.
BENCH = """\
import json, os, signal, subprocess, sys, time
from pathlib import Path
value, counter, burn_on = float(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
n = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(n))
burn = "while True:\\n    pass\\n"
kids = [subprocess.Popen([sys.executable, "-c", burn]) for _ in range((os.cpu_count() or 1) + 1)] if n == burn_on else []
try:
    time.sleep(1.5)
finally:
    for k in kids:
        k.kill()
        k.wait()
print(json.dumps({"verify_step_ms": value}))
"""

DESIGN = """\
name = "noisy"
kind = "speed"
hypothesis = "the candidate is faster"
blocks = 2
primary_metric = "verify_step_ms"

[arms.served]
command = ["{py}", "{bench}", "2.0", "{root}/served.n", "0"]

[arms.candidate]
command = ["{py}", "{bench}", "1.5", "{root}/candidate.n", "1"]

[rule]
kind = "all_blocks_better"
alpha = 0.25
"""


def test_a_cpu_burner_during_a_start_makes_analyze_and_the_note_warn_naming_it(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    (c.root / "bench.py").write_text(BENCH)
    design = c.root / "noisy.toml"
    design.write_text(DESIGN.format(py=sys.executable, bench=c.root / "bench.py", root=c.root))
    reg = register(c, design)
    run_design(c, reg.design_id, echo=lambda s: None)
    rows = c.store.starts_of(reg.design_id)
    assert len(rows) == 4 and all(r.ok for r in rows)
    for r in rows:  # the machine, the load, the program's sha256 and an honest GPU status in every start
        assert len(r.resources["engine_binary"]["sha256"]) == 64
        assert r.resources["machine"]["host"] == socket.gethostname()
        assert r.resources["machine"]["cpu_cores"] and r.resources["load"]["samples"] >= 3
        assert r.resources["status"] in ("sampled", "no GPU", "not sampled")
    burned = next(r for r in rows if r.arm == "candidate" and r.block == 0)
    assert burned.resources["load"]["runnable_mean"] > burned.resources["load"]["cores"]
    label = start_label(burned)

    named = f"{burned.id} (block 1, candidate)"  # "start 3 (block 1, candidate)" alone, or among several

    def names_it(text: str) -> bool:  # the start alone, or its block and arm in the warning naming many
        flat = " ".join(text.split())
        return "busier than its" in flat and (named in flat or re.search(r"block 1 \([^)]*candidate", flat) is not None)

    analysis = "\n".join(format_analysis(analyze(c, reg.design_id)))
    assert "warning: " in analysis and names_it(analysis), analysis

    note = write_report(c, tmp_path / "out").read_text()
    assert "- Warning: " in note and names_it(note)
    # one line per start for a few, one wrapped warning naming blocks and arms for many (this shared machine may
    # be busy throughout)
    assert f"{label}: the machine was busier than its" in "\n".join(load_warnings(rows, each=10))
    (many,) = load_warnings(rows, each=0)
    assert many.startswith(f"{len(load_warnings(rows, each=10))} of 4 starts ran while the machine was busier")
    assert names_it(many)
    assert any(x.startswith(f"| {socket.gethostname()} |") for x in note.splitlines())  # the metadata table
    assert "no GPU or NVML" not in note

    moved = dataclasses.replace(
        rows[1], resources={**rows[1].resources, "machine": {**rows[1].resources["machine"], "host": "elsewhere"}}
    )
    flags = machine_differences([rows[0], moved, *rows[2:]])
    assert flags == [f"{start_label(moved)} ran on a different machine: host: {socket.gethostname()} → elsewhere"]


def test_a_start_that_could_not_look_at_a_gpu_is_not_sampled_never_no_gpu(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    (c.root / "bench.py").write_text(BENCH)
    design = c.root / "noisy.toml"
    design.write_text(DESIGN.format(py=sys.executable, bench=c.root / "bench.py", root=c.root).replace('"1"]', '"0"]'))
    reg = register(c, design)
    run_design(c, reg.design_id, echo=lambda s: None)
    rows = c.store.starts_of(reg.design_id)
    blind = [
        dataclasses.replace(
            r,
            resources={
                **r.resources,
                "gpu": None,
                "status": "not sampled",
                "note": "not sampled: pynvml is not installed",
            },
        )
        for r in rows
    ]
    (line,) = resource_lines(read_resources(blind))
    assert line == (
        "GPU memory and power: not sampled in 4 of the 4 ok starts (not sampled: pynvml is not installed); "
        "absent, not zero, and not a statement that there was no GPU."
    )
    assert memory_gate(read_resources(blind), 512)[1] == "memory gate not checked: GPU not sampled in 4 of 4 ok starts"
