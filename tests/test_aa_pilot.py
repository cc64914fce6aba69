"""``frank plan DESIGN.toml --run-pilot``: an A/A pilot of the design's served arm built from the design file,
registered on the chained record, run by the runner ``frank run`` uses (real llama-server, tiny model), and the
plan made from it as ``--pilot ID`` makes it; a finished pilot of the same recipe and workload reused, an
unfinished one resumed, a fresh one on request; each refusal one line naming the file and field, nothing
registered."""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path
from typing import IO

import pytest

from conftest import frank
from frankenstein.campaign import open_campaign
from frankenstein.design.aapilot import pilot_document, prepare_pilot, toml_text
from frankenstein.design.budget import measured, pilot_sd, start_time, workload_turns
from frankenstein.design.model import ArmSpec, DesignFile, load_design
from frankenstein.design.registry import get, resolve_arm, verify
from frankenstein.design.timespent import duration, summarize
from frankenstein.workload.trace import load_trace
from helpers_campaign import TOML, make_campaign, make_workload, write_design
from helpers_cli import cli

pytestmark = pytest.mark.engine

EXTRA = """
[recipes.gone]
engine = "llamacpp"
model = "/nonexistent/m.gguf"

[recipes.broken]
engine = "llamacpp"
model = "pkg:tiny-target.gguf"
args = ["--no-such-flag-xyz", "--threads", "1"]
"""
QUICK = ("--sd", "0.05", "--effect", "0.1")  # the spread given: these tests are about which pilot, not the search
PILOT_LINE = re.compile(r"^pilot x-aa-pilot-1, run now, 3 blocks, took \d+\.\d s$")


@pytest.fixture(scope="module")
def camp(tmp_path_factory: pytest.TempPathFactory, llama_server_bin: str) -> Path:
    c = make_campaign(tmp_path_factory.mktemp("aapilot") / "c", TOML + EXTRA)
    make_workload(c.root / "workloads" / "w12.jsonl", turns=12, tokens=32)
    write_design(c.root / "x.toml", name="x", blocks=6, workload="workloads/w12.jsonl")
    c.close()
    return c.root


@pytest.fixture(scope="module")
def first(camp: Path) -> tuple[str, str]:
    """The first ``--run-pilot``, through the real CLI in a subprocess: (stdout, stderr)."""
    r = frank("plan", str(camp / "x.toml"), "--budget", "30m", "--run-pilot", "-c", str(camp), "--effect", "0.1")
    assert r.returncode == 0, r.stderr
    return r.stdout, r.stderr


def _starts(camp: Path) -> int:
    with open_campaign(camp) as c:
        return sum(len(c.store.starts_of(r.design_id)) for r in c.store.registry_rows())


def _designs(camp: Path) -> list[str]:
    with open_campaign(camp) as c:
        return [r.design_id for r in c.store.registry_rows()]


def test_the_pilot_is_registered_verified_and_run_by_the_runner(camp: Path, first: tuple[str, str]) -> None:
    out, err = first
    assert PILOT_LINE.match(out.splitlines()[0]), out
    assert "pilot: registered x-aa-pilot-1 (hash " in err
    assert "x-aa-pilot-1: 6 starts run, 0 already recorded" in err  # the runner's summary: 3 blocks × 2 arms
    assert "frank plan [" in err and "start 6/6 ends" in err  # frank run's progress lines
    with open_campaign(camp) as c:
        assert "ok  x-aa-pilot-1" in "\n".join(verify(c))  # on the chained record, verified with the rest
        reg = get(c, "x-aa-pilot-1")
        design = load_design(camp / "x.toml")
        served = resolve_arm(c, design, "served", camp / "x.toml")
        assert reg.design.kind == "aa" and reg.design.blocks == 3 and reg.design.stopping == "none"
        assert reg.frozen.recipes == {"served": served, "candidate": served}
        assert reg.frozen.workload_hash == load_trace(camp / "workloads" / "w12.jsonl").hash
        assert reg.design.replay == design.replay and reg.design.primary_metric == design.primary_metric
        assert all(s.status == "ok" for s in c.store.starts_of("x-aa-pilot-1"))
        assert len(c.store.starts_of("x-aa-pilot-1")) == 6
    written = camp / "designs" / "pilots" / "x-aa-pilot.toml"
    assert (camp / "designs" / "x-aa-pilot-1.toml").read_bytes() == written.read_bytes()


def test_the_plan_cites_the_pilot_and_its_numbers_come_from_its_phases(camp: Path, first: tuple[str, str]) -> None:
    out = first[0].splitlines()
    with open_campaign(camp) as c:
        pilot = get(c, "x-aa-pilot-1")
        n = workload_turns(c, pilot.design)
        st = start_time(summarize(c.store.starts_of("x-aa-pilot-1")), (n, measured(n, pilot.design)), (n, n - 1))
        sd, source = pilot_sd(c, "x-aa-pilot-1")
    assert out[1].startswith(f"design {camp / 'x.toml'}: 2 arms × 1 start(s), 6 blocks, 12 turns per start")
    assert out[2] == (
        f"a start: about {duration(st.seconds)} ({duration(st.engine_seconds)} engine start), from pilot "
        f"x-aa-pilot-1's 6 starts of 12 turns, replay scaled ×1.00 (turns after the warm-up); a block: about "
        f"{duration(2 * st.seconds)}"
    )
    assert out[3].startswith(f"spread: sd {sd:.4g} of the block log ratio ({source});")


def test_a_second_call_reuses_the_finished_pilot_and_fresh_runs_a_new_one(
    camp: Path, first: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    starts, designs = _starts(camp), _designs(camp)
    code, out, err = cli(capsys, "plan", str(camp / "x.toml"), "--run-pilot", "-c", str(camp), *QUICK)
    assert code == 0, err
    assert out.splitlines()[0].startswith(
        "pilot x-aa-pilot-1, reused (a finished pilot of the same recipe and workload"
    )
    assert "from pilot x-aa-pilot-1's 6 starts" in out
    assert (_starts(camp), _designs(camp)) == (starts, designs)  # nothing run, nothing registered
    code, out, err = cli(
        capsys,
        "plan",
        str(camp / "x.toml"),
        "--run-pilot",
        "--fresh-pilot",
        "--pilot-blocks",
        "2",
        "-c",
        str(camp),
        *QUICK,
    )
    assert code == 0, err
    assert re.match(r"^pilot x-aa-pilot-2, run now, 2 blocks, took ", out), out
    assert _starts(camp) == starts + 4
    code, out, err = cli(
        capsys, "plan", str(camp / "x.toml"), "--run-pilot", "--pilot-blocks", "2", "-c", str(camp), *QUICK
    )
    assert out.startswith("pilot x-aa-pilot-2, reused")  # the newest finished pilot
    code, out, err = cli(capsys, "plan", str(camp / "x.toml"), "--run-pilot", "-c", str(camp), *QUICK)
    assert out.startswith("pilot x-aa-pilot-1, reused")  # 3 blocks asked (the default): the 2-block one is too small
    assert _starts(camp) == starts + 4


def test_an_unfinished_pilot_is_resumed_and_the_slice_is_the_designs(
    camp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pilot registered and never run (as after Ctrl-C before its first start) is resumed, not registered
    again; a design that slices the workload (max_turns) gets a pilot of that slice, not the 12-turn one."""
    sliced = write_design(camp / "s.toml", name="s", blocks=4, workload="workloads/w12.jsonl")
    sliced.write_text(sliced.read_text().replace("warmup_turns = 1", "warmup_turns = 1\nmax_turns = 5"))
    with open_campaign(camp) as c:
        waiting = prepare_pilot(c, sliced)
    assert waiting.how == "run now" and len(waiting.todo) == 6 and waiting.reg.design.replay.max_turns == 5
    code, out, err = cli(capsys, "plan", str(sliced), "--run-pilot", "-c", str(camp), *QUICK)
    assert code == 0, err
    lines = out.splitlines()
    assert re.match(r"^pilot s-aa-pilot-1, resumed, 3 blocks, took ", lines[0]), out
    assert "6 starts run, 0 already recorded" in err
    assert "5 turns per start" in lines[1] and "from pilot s-aa-pilot-1's 6 starts of 5 turns" in lines[2]


def _write(camp: Path, name: str, text: str) -> Path:
    path = write_design(camp / f"{name}.toml", name=name, blocks=3, workload="workloads/w12.jsonl")
    path.write_text(path.read_text().replace('[arms.served]\nrecipe = "served"', text))
    return path


@pytest.mark.parametrize(
    ("make", "args", "message"),
    [
        (None, ["--pilot", "x-aa-pilot-1"], "--run-pilot runs a new A/A pilot and --pilot names one already run"),
        ("nope", [], "nope.toml: arms.served.recipe: unknown recipe 'nope' (known: "),
        ("nopart", [], "nopart.toml: arms.served.parts[0]: unknown part 'ghost'"),
        ("fid", [], "fid.toml: kind: --run-pilot runs an A/A pilot of a speed design's served arm"),
        ("gone", [], "gone.toml: arms.served: model file /nonexistent/m.gguf does not exist (recipe gone)"),
    ],
)
def test_refusals_are_one_line_and_register_nothing(
    camp: Path, capsys: pytest.CaptureFixture[str], make: str | None, args: list[str], message: str
) -> None:
    texts = {
        "nope": '[arms.served]\nrecipe = "nope"',
        "nopart": '[arms.served]\nrecipe = "served"\nparts = ["ghost"]',
        "fid": '[arms.served]\nrecipe = "served"',
        "gone": '[arms.served]\nrecipe = "gone"',
    }
    design = camp / "x.toml" if make is None else _write(camp, make, texts[make])
    if make == "fid":
        design.write_text(design.read_text().replace('kind = "speed"', 'kind = "fidelity"'))
    before = _designs(camp)
    code, out, err = cli(capsys, "plan", str(design), "--run-pilot", "-c", str(camp), *args)
    assert code != 0 and message in err and "Traceback" not in err, err
    assert out == "" and _designs(camp) == before


def test_pilot_options_need_run_pilot_a_design_file_and_a_campaign(
    camp: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, "plan", str(camp / "x.toml"), "--run-pilot", "-c", str(tmp_path / "none"))
    assert code == 1 and out == "" and f"{tmp_path / 'none'}: no frank.toml here" in err
    assert not (tmp_path / "none").exists()
    code, _, err = cli(capsys, "plan", str(camp / "x.toml"), "--pilot-blocks", "3", "--pilot", "x-aa-pilot-1")
    assert code == 2 and "--pilot-blocks and --fresh-pilot go with --run-pilot" in err
    code, _, err = cli(capsys, "plan", "--run-pilot", "--effect", "0.05", "--direction", "lower", "--sd", "0.1")
    assert code == 2 and "--run-pilot plans a design file: give DESIGN.toml" in err
    code, _, err = cli(capsys, "plan", str(camp / "x.toml"), "--run-pilot", "--pilot-blocks", "1", "-c", str(camp))
    assert code == 2 and "--pilot-blocks" in err  # one block has no spread


def test_the_pilot_file_round_trips_awkward_text(tmp_path: Path) -> None:
    """The pilot's TOML is written by frank, so it must read back as the document it came from, whatever the
    design's path or name holds (quotes, backslashes, newlines, DEL, non-ASCII), and the name stays a name."""
    path = write_design(tmp_path / "d.toml", name="n" * 64, workload="workloads/w.jsonl")
    design = load_design(path)
    doc = pilot_document(design, Path('we"ird\\dir\n\x7f/é\t.toml'), 3)
    assert tomllib.loads(toml_text(doc)) == doc
    pilot = DesignFile.model_validate(doc)
    assert pilot.name == "n" * 55 + "-aa-pilot" and len(pilot.name) == 64
    assert pilot.arms["served"] == pilot.arms["candidate"] == design.arms["served"]
    argv = ["python3", "-c", "print('{\"m\": 1}')"]
    command = design.model_copy(update={"arms": {**design.arms, "served": ArmSpec(command=argv)}})
    doc = pilot_document(command, path, 3)
    assert tomllib.loads(toml_text(doc))["arms"]["candidate"] == {"parts": [], "command": argv}


def test_a_served_arm_that_cannot_start_is_refused_and_its_pilot_never_reused(
    camp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An engine that exits at once: the pilot's failed starts are recorded (every start is), the plan is
    refused naming the design file's served arm, and the next call runs a new pilot instead of reusing it."""
    design = _write(camp, "broken", '[arms.served]\nrecipe = "broken"')
    code, out, err = cli(capsys, "plan", str(design), "--run-pilot", "-c", str(camp), *QUICK)
    assert code == 1 and out == "" and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"frank: error: {design}: arms.served: the served arm did not run: all 6 starts of pilot ")
    assert "error: invalid argument: --no-such-flag-xyz" in last
    code, out, err = cli(capsys, "plan", str(design), "--pilot", "broken-aa-pilot-1", "-c", str(camp), *QUICK)
    assert code == 1 and "--pilot: none of design broken-aa-pilot-1's 6 starts ran, so it times nothing" in err
    code, out, err = cli(capsys, "plan", str(design), "--run-pilot", "-c", str(camp), *QUICK)
    assert code == 1 and "pilot: registered broken-aa-pilot-2" in err


def test_the_note_shows_the_pilot_as_a_pilot(
    camp: Path, first: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(capsys, "report", "-c", str(camp), "-o", str(tmp_path / "note"))
    assert code == 0, err
    note = (tmp_path / "note" / "note.md").read_text()
    section = note.split("## Design `x-aa-pilot-1`", 1)[1].split("\n## ", 1)[0]
    assert f"- Hypothesis: A/A pilot of {camp / 'x.toml'}'s served arm, run by frank plan --run-pilot" in section
    assert "It is an A/A design: it measures how often the rule fires on no change" in section


def _read(stream: IO[str], into: queue.Queue[str]) -> None:
    for line in stream:
        into.put(line.rstrip("\n"))


def test_a_pilot_cut_by_ctrl_c_is_resumed_counting_no_start_twice(
    camp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real SIGINT while the pilot's third start runs: frank plan exits 130 with its recorded starts kept; the
    next --run-pilot resumes that pilot (not a new one) and runs only the starts it lacks."""
    design = write_design(camp / "cut.toml", name="cut", blocks=3, workload="workloads/w12.jsonl")
    design.write_text(design.read_text().replace("warmup_turns = 1", "warmup_turns = 1\nmax_turns = 8"))
    cmd = [sys.executable, "-m", "frankenstein", "plan", str(design), "--run-pilot", "-c", str(camp), *QUICK]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stderr is not None
    err: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_read, args=(p.stderr, err), daemon=True).start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 120
        while not any("start 3/6 begins" in line for line in seen):  # two starts are recorded by now
            seen.append(err.get(timeout=max(deadline - time.monotonic(), 0.1)))
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=60) == 130
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    with open_campaign(camp) as c:
        kept = len(c.store.starts_of("cut-aa-pilot-1"))
    assert 2 <= kept < 6
    code, out, err_text = cli(capsys, "plan", str(design), "--run-pilot", "-c", str(camp), *QUICK)
    assert code == 0, err_text
    assert re.match(r"^pilot cut-aa-pilot-1, resumed, 3 blocks, took ", out), out
    assert f"cut-aa-pilot-1: {6 - kept} starts run, {kept} already recorded" in err_text
    with open_campaign(camp) as c:
        assert len(c.store.starts_of("cut-aa-pilot-1")) == 6
        assert [r.design_id for r in c.store.registry_rows() if r.name == "cut-aa-pilot"] == ["cut-aa-pilot-1"]
