"""What a replay says about the recording: how many turns reproduced the recorded text, and recorded prompt
counts from another tokenizer kept as metadata (every compared turn differs) rather than invalidating every
turn; a difference on some turns only still invalidates the start. Real llama-server, tiny model."""

from __future__ import annotations

from pathlib import Path

import pytest

from frankenstein.config import ResolvedRecipe
from frankenstein.design import phases
from frankenstein.design.start import measure_start
from frankenstein.engines import start_engine
from frankenstein.workload.replay import ReplaySettings, replay_body, reproduced
from frankenstein.workload.trace import load_trace, write_trace

from conftest import frank
from helpers_campaign import make_campaign, make_workload

pytestmark = pytest.mark.engine


def _reworded(src: Path, dst: Path, *, prompt_shift: dict[int, int], texts: dict[int, str]) -> Path:
    """The workload with some turns' recorded prompt counts shifted and recorded texts replaced."""
    turns = []
    for i, t in enumerate(load_trace(src).turns):
        out = t.output.model_copy(
            update={
                "prompt_tokens": (t.output.prompt_tokens or 0) + prompt_shift.get(i, 0),
                "text": texts.get(i, t.output.text),
            }
        )
        turns.append(t.model_copy(update={"output": out}))
    write_trace(dst, turns)
    return dst


def _as_replayed(recipe: ResolvedRecipe, tmp_path: Path) -> Path:
    """A workload whose recorded texts and prompt counts are what this engine answers to replay's bodies."""
    base = load_trace(make_workload(tmp_path / "w0.jsonl", turns=4, tokens=12))
    settings = ReplaySettings(warmup_turns=0)
    turns = []
    with start_engine(recipe, tmp_path / "logs0") as eng:
        for t in base.turns:
            reply = eng.request(t.endpoint, replay_body(t, settings), turn_id=t.turn_id)
            update = {"prompt_tokens": reply.timing.prompt_tokens, "text": reply.text}
            turns.append(t.model_copy(update={"output": t.output.model_copy(update=update)}))
    write_trace(tmp_path / "w.jsonl", turns)
    return tmp_path / "w.jsonl"


def test_prompt_counts_from_another_tokenizer_are_metadata(tiny_recipe: ResolvedRecipe, tmp_path: Path) -> None:
    wl = _as_replayed(tiny_recipe, tmp_path)
    every = _reworded(wl, tmp_path / "every.jsonl", prompt_shift={0: 7, 1: 7, 2: 7, 3: 7}, texts={})
    some = _reworded(wl, tmp_path / "some.jsonl", prompt_shift={2: 7}, texts={})
    with phases.recording() as rec:
        ok = measure_start(tiny_recipe, load_trace(every), ReplaySettings(warmup_turns=0), tmp_path / "logs1")
    assert ok.status == "ok", ok.reason
    assert "another tokenizer" in rec.notes["replay_note"]
    bad = measure_start(tiny_recipe, load_trace(some), ReplaySettings(warmup_turns=0), tmp_path / "logs2")
    assert bad.status == "invalid" and "turn s1-0002: prompt has" in str(bad.reason)


def test_replay_says_how_many_turns_reproduced_the_recorded_text(tiny_recipe: ResolvedRecipe, tmp_path: Path) -> None:
    camp = make_campaign(tmp_path / "c")
    camp.close()
    wl = _as_replayed(tiny_recipe, tmp_path)
    changed = _reworded(wl, tmp_path / "changed.jsonl", prompt_shift={}, texts={1: "not what it says"})
    r = frank("replay", "base", str(changed), "-c", str(tmp_path / "c"), "--warmup", "0")
    assert r.returncode == 0, r.stderr
    assert "reproduced the recorded text on 3 of 4 turns" in r.stdout


def test_reproduced_counts_only_turns_with_a_recorded_text() -> None:
    rows = [{"text_match": 1}, {"text_match": 0}, {}, {"text_match": 1}]
    assert reproduced(rows) == (2, 3)
