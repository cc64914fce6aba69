"""Builders for test campaigns: a campaign on the shipped tiny models and a small workload."""

from __future__ import annotations

from pathlib import Path

from frankenstein.campaign import Campaign, init_campaign
from frankenstein.workload.trace import Turn, write_trace

TOML = """\
name = "t"
served = "base"

[recipes.base]
engine = "llamacpp"
model = "pkg:tiny-target.gguf"
args = ["--ctx-size", "2048", "--threads", "1", "--parallel", "1", "--seed", "1"]
start_timeout_s = 120

[parts.draft]
description = "tiny draft model"
args = ["-md", "pkg:tiny-draft.gguf", "--spec-type", "draft-simple", "--spec-draft-n-max", "8"]
provenance = { fork = "https://github.com/ggml-org/llama.cpp", commit = "abc123", author = "ggml-org", licence = "MIT" }

[parts.threads1]
description = "same recipe, different batch size"
args = ["--batch-size", "256"]
"""

PROMPTS = [
    "def parse(line):\n    ",
    "import json\n\nclass Config:\n",
    "# Fix the failing test in utils.py\n",
    "for i in range(10):\n",
    "The function returns",
    "def main():\n    args = ",
]


def make_campaign(root: Path, toml: str = TOML) -> Campaign:
    return init_campaign(root, toml=toml)


def make_workload(path: Path, turns: int = 6, tokens: int = 16) -> Path:
    rows = [
        Turn(
            turn_id=f"s1-{i:04d}",
            session_id="s1",
            turn_index=i,
            endpoint="/completion",
            request={"prompt": PROMPTS[i % len(PROMPTS)], "cache_prompt": True},
            output={"text": "    return x  # recorded", "completion_tokens": tokens},
            source="test",
        )
        for i in range(turns)
    ]
    write_trace(path, rows)
    return path


def write_design(
    path: Path,
    *,
    name: str = "d",
    kind: str = "speed",
    blocks: int = 5,
    rule: str = "sign",
    candidate_parts: str = '["threads1"]',
    workload: str = "workloads/w.jsonl",
    extra: str = "",
) -> Path:
    path.write_text(f"""\
name = "{name}"
kind = "{kind}"
hypothesis = "the part changes time per verify step"
blocks = {blocks}
workload = "{workload}"
primary_metric = "verify_step_ms"
secondary = ["tokens_per_step"]
{extra}
[arms.served]
recipe = "served"

[arms.candidate]
recipe = "served"
parts = {candidate_parts}

[rule]
kind = "{rule}"
alpha = 0.05

[replay]
warmup_turns = 1
""")
    return path
