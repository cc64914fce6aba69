"""``frank demo``: the whole loop on the embedded default (llama.cpp on the CPU, tiny shipped models).

part → design → register → run → verdict → adopt or refuse → progress note. Each stage prints what it
did; the campaign folder is kept so the note and the store can be read afterwards.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from frankenstein.campaign import Campaign, default_toml, init_campaign
from frankenstein.config import load_config
from frankenstein.design.analysis import analyze, format_analysis
from frankenstein.design.dryrun import requirement_line
from frankenstein.design.registry import register
from frankenstein.design.runner import run_design
from frankenstein.engines.check import check_recipe
from frankenstein.errors import LedgerError
from frankenstein.ledger import adopt, format_served
from frankenstein.measure.noise import suggested_threads
from frankenstein.report import write_report
from frankenstein.shipped import data_path

SPEED_DESIGN = """\
name = "draft-speed"
kind = "speed"
hypothesis = "Speculative decoding with the tiny draft lowers decode time per generated token on the demo workload, one request at a time."
blocks = {blocks}
workload = "pkg:demo-workload.jsonl"
primary_metric = "decode_ms_per_token"
secondary = ["verify_step_ms", "tokens_per_step", "ttft_ms"]
stopping = "none"
failure_policy = "drop_block"

[arms.served]
recipe = "served"

[arms.candidate]
recipe = "served"
parts = ["draft"]

[rule]
kind = "sign"
alpha = 0.05

[replay]
warmup_turns = 1
max_turns = {turns}
"""


def _stage(echo: Callable[[str], None], title: str) -> None:
    echo("")
    echo(f"== {title} ==")


def stage_engine(c: Campaign, echo: Callable[[str], None]) -> None:
    _stage(echo, "1. one start of the tiny target with the draft: per-request server timings")
    check_recipe(c.recipe("base", ["draft"]), c.logs, n_predict=48, requests=4, echo=echo)


def stage_speed(c: Campaign, echo: Callable[[str], None], blocks: int, turns: int) -> str:
    _stage(echo, f"2. a registered {blocks}-block speed design: served vs served + draft")
    return speed_design(c, echo, "draft", blocks, turns)


def speed_design(c: Campaign, echo: Callable[[str], None], part: str, blocks: int, turns: int) -> str:
    """Register, run and analyze the demo's speed design of ``part`` against the served recipe."""
    name = "draft-speed" if part == "draft" else f"{part}-speed"
    path = c.root / "designs" / f"{name}.toml"
    text = SPEED_DESIGN.format(blocks=blocks, turns=turns)
    if part != "draft":
        text = text.replace('name = "draft-speed"', f'name = "{name}"').replace(
            'parts = ["draft"]', f'parts = ["{part}"]'
        )
        text = text.replace("Speculative decoding with the tiny draft", f"The part {part}")
    path.write_text(text)
    reg = register(c, path)
    echo(
        f"registered {reg.design_id} (seed {reg.seed}); arm order per block: "
        + ", ".join("/".join(a[0].upper() for a in order) for order in reg.schedule)
    )
    need = requirement_line(reg.design)
    if need:
        echo(need)
    echo(run_design(c, reg.design_id, echo=echo))
    for line in format_analysis(analyze(c, reg.design_id)):
        echo(line)
    return reg.design_id


THREADS_PART_TOML = """
[parts.threads-all]
description = "Every core to the engine: --threads {cores} (the base recipe leaves one core to the client and the OS)."
set = {{ "--threads" = "{cores}" }}
"""


def stage_threads(c: Campaign, echo: Callable[[str], None], blocks: int, turns: int) -> str | None:
    """A part this machine can confirm when it is quiet: every core to the engine. None on one core (the part
    would be the base recipe itself: registration refuses identical arms)."""
    cores = os.cpu_count() or 1
    _stage(
        echo,
        f"3. a registered {blocks}-block speed design: served ({suggested_threads(cores)} thread(s)) vs every core",
    )
    if suggested_threads(cores) >= cores:
        echo(f"skipped: {cores} core(s); the base recipe already gives the engine every core")
        return None
    with open(c.root / "frank.toml", "a") as f:
        f.write(THREADS_PART_TOML.format(cores=cores))
    c.config = load_config(c.root / "frank.toml")
    return speed_design(c, echo, "threads-all", blocks, turns)


def run_demo(
    directory: Path | None = None, *, blocks: int = 5, turns: int = 4, echo: Callable[[str], None] = print
) -> Path:
    root = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="frank-demo-"))
    c = init_campaign(root, toml=default_toml("demo"))
    echo(f"demo campaign: {root}")
    with c:
        stage_engine(c, echo)
        speed_id = stage_speed(c, echo, blocks, turns)
        threads_id = stage_threads(c, echo, blocks, turns)
        stage_fidelity(c, echo)
        stage_ledger(c, echo, speed_id, threads_id)
        note = stage_report(c, echo)
    echo("")
    echo(f"progress note: {note}")
    return note


def stage_fidelity(c: Campaign, echo: Callable[[str], None]) -> str:
    _stage(echo, "4. a registered fidelity check: the Q8_0 target against the served recipe's own noise")
    return demo_fidelity(c, data_path("demo-workload.jsonl"), echo, max_positions=64)


def stage_ledger(c: Campaign, echo: Callable[[str], None], speed_id: str, threads_id: str | None) -> None:
    _stage(echo, "5. the ledger: adopt a part only if its design confirmed it and its gates passed")
    try_adopt(c, echo, "draft", speed_id)
    if threads_id is not None:
        try_adopt(c, echo, "threads-all", threads_id)
    for line in format_served(c):
        echo(line)


def try_adopt(c: Campaign, echo: Callable[[str], None], part: str, design_id: str) -> None:
    """Adopt ``part`` on ``design_id``, or print why the ledger refuses."""
    try:
        entry = adopt(c, part, design_id)
        echo(f"adopted: {part} (design {design_id}, ledger step {entry.seq})")
    except LedgerError as exc:
        echo(str(exc))


def stage_report(c: Campaign, echo: Callable[[str], None]) -> Path:
    _stage(echo, "6. the progress note")
    return write_report(c, c.root / "reports" / "note")


# ---------------------------------------------------------------- the fidelity stage

DEMO_PART = "q8"
DEMO_PART_TOML = """
[parts.q8]
description = "Q8_0 copy of the target weights (a small, real numeric change)."
model = "pkg:tiny-target-q8.gguf"
provenance = { fork = "https://github.com/ggml-org/llama.cpp", commit = "", author = "ggml-org", licence = "MIT" }
"""

DEMO_DESIGN = """\
name = "fidelity-q8"
kind = "fidelity"
hypothesis = "the Q8_0 target adds less than {margin} nats of KL to the served engine's own start-to-start noise"
blocks = 1
starts_per_arm = 3
workload = "{workload}"

[arms.served]
recipe = "served"

[arms.candidate]
recipe = "served"
parts = ["{part}"]

[rule]
kind = "fidelity"
tolerance = {tolerance}
margin = {margin}
threshold = 0.5
max_positions_above = 1

[fidelity]
top_k = 64
max_positions = {max_positions}
"""


def demo_fidelity(
    campaign: Campaign,
    workload_path: str | Path,
    echo: Callable[[str], None] = print,
    *,
    tolerance: float = 0.02,
    margin: float = 0.01,
    max_positions: int = 96,
) -> str:
    """Register, run and analyze a small fidelity design of the Q8_0 target against the served recipe.

    Adds ``[parts.q8]`` to the campaign's ``frank.toml`` if it is missing (and reloads it). Returns the
    verdict word. With the shipped models the mean KL is about 0.005 nats, so it passes 0.02."""
    toml = campaign.root / "frank.toml"
    if DEMO_PART not in campaign.config.parts:
        with open(toml, "a") as f:
            f.write(DEMO_PART_TOML)
        campaign.config = load_config(toml)
    wl = Path(workload_path).resolve()
    design = campaign.root / "fidelity-q8.toml"
    design.write_text(
        DEMO_DESIGN.format(workload=wl, part=DEMO_PART, tolerance=tolerance, margin=margin, max_positions=max_positions)
    )
    reg = register(campaign, design)
    echo(
        f"registered {reg.design_id} (fidelity, {DEMO_PART} vs served, 3 starts per arm, tolerance {tolerance:g} "
        f"nats, margin over the noise floor {margin:g} nats)"
    )
    echo(run_design(campaign, reg.design_id, echo=echo))
    a = analyze(campaign, reg.design_id)
    for line in format_analysis(a):
        echo(line)
    return a.word
