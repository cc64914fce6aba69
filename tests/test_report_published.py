"""The note a team would publish (issue 31): one campaign with a speed design adopted with a concurrency
scope and its own limits, a fidelity design, an agent design with no harm shown, and a base recipe whose
model, engine and weight format carry provenance; its summary, sections and credits say all of it, and
``note.html`` renders in headless Chromium with the same text as ``note.json`` and every plot visible.

The store is built as in test_report_note.py and test_report_kinds.py (real registry, real ledger, starts
written with fixed values); Chromium is the real browser, run headless on the file.
"""

from __future__ import annotations

import base64
import html
import io
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from matplotlib.image import imread

from frankenstein import ledger, part_status
from frankenstein.design.registry import register
from frankenstein.errors import ConfigError
from frankenstein.report import write_report
from frankenstein.report.html import note_html
from frankenstein.scope import parse_scope
from frankenstein.store import ObservedDraw

from helpers_campaign import TOML, make_campaign, make_workload
from helpers_ledger import CONFIRMED, stored_design
from test_report_kinds import AGENT_DESIGN, stored_fidelity

PUBLISHED = (
    TOML.replace(
        "start_timeout_s = 120\n",
        'start_timeout_s = 120\nprovenance = { fork = "https://huggingface.co/diffbot/pack", commit = "r3", '
        'author = "diffbot", licence = "Apache-2.0", credit = "the 3-bit pack and its serving recipe" }\n',
        1,
    )
    + """
[models.tiny-target]
fork = "https://huggingface.co/deepseek-ai/V4.1-Flash"
commit = "1017"
author = "DeepSeek"
licence = "MIT"

[engines.llamacpp]
fork = "https://github.com/ggml-org/llama.cpp"
commit = "b6000"
author = "ggml-org"
licence = "MIT"
credit = "the engine"

[formats.gguf]
author = "ggml-org"
credit = "the GGUF weight format"

[note]
title = "The Frankenstein, Part 2: A Part from Another Fork"
series = "A progress note from a running campaign, following Part 1"
authors = ["Artus", "the campaign's agents"]
assistance = "AI agents designed and ran these tests; an AI agent drafted this note."
"""
)
LIMITS = ["Step time, not task time", "Measured without the region cache"]
NOTE = "concurrency 5 and above is not yet fidelity-checked"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def stored_agent(camp) -> None:
    path = camp.root / "agent.toml"
    path.write_text(AGENT_DESIGN)
    reg = register(camp, path)
    for b, order in enumerate(reg.schedule):
        for pos, arm in enumerate(order):
            passed = {"fix-ledger-month": True, "log-incident": b % 2 == 0}  # the same in both arms
            eps = [
                {"task_id": t, "draw": 0, "task_hash": "h" * 8, "status": "submitted", "passed": p, "turns": 3}
                for t, p in passed.items()
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


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("published")
    camp = make_campaign(root / "c", toml=PUBLISHED)
    make_workload(camp.root / "workloads" / "w.jsonl")
    speed = stored_design(
        camp, name="draft-speed", served=CONFIRMED[0], candidate=CONFIRMED[1], extra=f"limits = {json.dumps(LIMITS)}"
    )
    ledger.adopt(camp, "draft", speed.design_id, scope=parse_scope(["concurrency=1", f"note={NOTE}"]))
    part_status.park(camp, "threads1", "8.2-8.7% longer per job on a CPU benchmark of recorded job shapes", [])
    for n in range(5):  # agent draws run since, outside any design (frank tasks draw -c; test_observed_draws.py)
        camp.store.insert_observed_draw(ObservedDraw(f"2025-03-07T10:0{n}:00.000Z", 1, n, 6, 5, 0, 0))
    stored_fidelity(camp, "fid", 0.3)
    stored_agent(camp)
    write_report(camp, root / "out")
    camp.close()
    return root / "out"


def section(text: str, head: str) -> str:
    return text.split(head, 1)[1].split("\n## ", 1)[0]


def test_the_note_says_scope_limits_verdicts_and_credits(published: Path) -> None:
    text = (published / "note.md").read_text()
    assert text.startswith("# The Frankenstein, Part 2: A Part from Another Fork\n\n")
    assert "A progress note from a running campaign, following Part 1. By Artus and the campaign's agents." in text
    summary = section(text, "## Summary")
    assert (
        "**adopted** `draft` (step 1, design `draft-speed-1`): verify_step_ms ratio 0.8132 (-18.68%; candidate − "
        "served -1.88 ms per step on average), 6 of 6 blocks in its favour, p = 1/64 = 0.01562, verdict confirmed; "
        f"adopted for concurrency 1 (one request at a time); note: {NOTE}." in summary
    )
    assert "(fidelity, part `draft`): mean KL" in summary
    assert "verdict no harm shown; a harm check on task passes." in summary
    assert "- **parked** `threads1` (step 2" in summary and "8.2-8.7% longer per job" in summary
    assert "- `threads1`: parked" in section(text, "## What didn't work")
    speed = section(text, "## Design `draft-speed-1`")
    assert speed.rstrip().endswith("- Step time, not task time.\n- Measured without the region cache.") or (
        "- Step time, not task time.\n- Measured without the region cache.\n\n### Machine" in speed
    )
    agent = section(text, "## Design `agent-harm-1`")
    assert "**It said:** no harm shown (" in agent and "- No harm shown is not equal quality" in agent
    assert "arms pass equally often; every loss is excluded at one-sided 95% (" in agent  # the harm bound
    fid = section(text, "## Design `fid-1`")
    assert "each forced (a fidelity start takes no warm-up turn)" in fid
    credits = section(text, "## Credits")
    for row in (
        "| recipe | `base` | the 3-bit pack and its serving recipe | https://huggingface.co/diffbot/pack | r3 | "
        "diffbot | Apache-2.0 |",
        "| model | `tiny-target` | not given | https://huggingface.co/deepseek-ai/V4.1-Flash | 1017 | DeepSeek | MIT |",
        "| engine | `llamacpp` | the engine | https://github.com/ggml-org/llama.cpp | b6000 | ggml-org | MIT |",
        "| format | `gguf` | the GGUF weight format | not given | not given | ggml-org | not given |",
        "| `draft` | https://github.com/ggml-org/llama.cpp | abc123 | ggml-org | MIT | step 1 |",
    ):
        assert row in credits, row
    assert (
        "## Assistance and method\n\nAI agents designed and ran these tests; an AI agent drafted this note.\n" in text
    )
    observed = section(text, "## Agent draws outside designs (observational)")
    assert "- Under step 1 (adopt `draft`): 5 draw(s), 30 episodes, 25 passed; no engine or episode error." in observed


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("chromium is not installed: the Makefile's setup installs Debian's `chromium`")
    return subprocess.run(
        [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=120
    )


def visible_text(dom: str) -> str:
    """The text of the dumped DOM's body, whitespace collapsed (no tags, entities decoded)."""
    body = re.sub(r"</?(code|strong)>", "", dom.split("<body>", 1)[1])  # inline tags join their text
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", body))).strip()


def test_html_note_renders_in_headless_chromium_with_every_plot(published: Path, tmp_path: Path) -> None:
    page = published / "note.html"
    source = page.read_text()
    assert "<script" not in source and "http://" not in source.split("<body>")[0]
    assert not re.search(r'src="(?!data:image/png;base64,)', source)  # nothing fetched: every image inline
    dom = chromium("--dump-dom", page.as_uri(), profile=tmp_path / "p1")
    assert dom.returncode == 0, dom.stderr
    text = visible_text(dom.stdout)
    doc = json.loads((published / "note.json").read_text())
    for t in doc["tables"]:  # every cell of every table of note.json is on the rendered page
        for row in [t["header"], *t["rows"]]:
            for cell in row:
                assert re.sub(r"\s+", " ", cell.replace("`", "")).strip() in text, cell
    for d in doc["designs"]:
        assert d["word"] in text
    # every plot: the rendered page shows each inline image (decoded by Chromium, not empty, not white)
    images = re.findall(r'<img alt="([^"]*)" title="([^"]*)" src="(data:image/png;base64,[^"]+)"', dom.stdout)
    plots = sorted(p.name for p in published.glob("*.png"))
    assert sorted(title for _, title, _ in images) == plots and len(plots) == 3
    board = tmp_path / "board.html"  # the same <img> elements, each in its own box at a known place
    boxes = "".join(
        f'<img style="position:absolute;left:0;top:{i * 420}px;width:560px;height:400px" src="{src}">'
        for i, (_, _, src) in enumerate(images)
    )
    board.write_text(f'<html><body style="margin:0;background:#fff">{boxes}</body></html>')
    shot = tmp_path / "shot.png"
    r = chromium(
        f"--screenshot={shot}", f"--window-size=560,{420 * len(images)}", board.as_uri(), profile=tmp_path / "p2"
    )
    assert r.returncode == 0 and shot.exists(), r.stderr
    pixels = imread(io.BytesIO(shot.read_bytes()))
    for i, (alt, title, src) in enumerate(images):
        box = pixels[i * 420 + 10 : i * 420 + 390, 10:550, :3]
        inked = (box.min(axis=2) < 0.8).mean()  # share of pixels that are not near-white
        assert inked > 0.02, f"{title} ({alt}) rendered blank"
        assert base64.b64decode(src.split(",", 1)[1]) == (published / title).read_bytes()


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ('[note]\ntitel = "typo"\n', "note.titel"),
        ('[note]\nauthors = "one string"\n', "note.authors"),
        ('[models.m]\nlicense = "MIT"\n', "models.m.license"),
        ("[formats.f]\nauthor = 3\n", "formats.f.author"),
    ],
)
def test_a_bad_note_or_provenance_table_names_file_and_field(tmp_path: Path, extra: str, field: str) -> None:
    with pytest.raises(ConfigError) as e:
        make_campaign(tmp_path / "c", toml=TOML + extra)
    assert e.value.field == field and str(e.value.path).endswith("frank.toml")


def test_html_escapes_what_the_authors_wrote(tmp_path: Path) -> None:
    """Text from frank.toml and design files is escaped: a script tag is text, a bar in a cell stays in its cell."""
    lines = [
        "# <script>alert(1)</script>",
        "",
        "| part | for |",
        "| --- | ---: |",
        "| `a\\|b` | <img src=x onerror=alert(1)> |",
        "",
        "![missing](nowhere.png)",
    ]
    page = note_html(lines, {})
    assert "<script>" not in page and "<img src=x" not in page
    assert '<td class="l"><code>a|b</code></td><td class="r">&lt;img src=x onerror=alert(1)&gt;</td>' in page
    assert "(plot nowhere.png not drawn)" in page
