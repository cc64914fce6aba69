"""``frank workload stats``: counts, estimates said as such, and the repeated-prefix share."""

from __future__ import annotations

from pathlib import Path

import pytest

from frankenstein.cli import main
from frankenstein.workload.stats import compute_stats, format_stats, prompt_text
from frankenstein.workload.trace import RecordedOutput, Turn, load_trace, workload_from_turns, write_trace


def turn(session: str, i: int, messages: list[dict[str, str]], out: RecordedOutput) -> Turn:
    return Turn(
        turn_id=f"{session}-{i}",
        session_id=session,
        turn_index=i,
        endpoint="/v1/chat/completions",
        request={"messages": messages},
        output=out,
    )


def sample() -> list[Turn]:
    sys_ = {"role": "system", "content": "S" * 30}
    m1 = [sys_, {"role": "user", "content": "fix"}]
    m2 = m1 + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "next"}]
    counted = RecordedOutput(text="ok", prompt_tokens=10, completion_tokens=2)
    return [
        turn("a", 0, m1, counted),
        turn("a", 1, m2, RecordedOutput(text="done", prompt_tokens=20, completion_tokens=3)),
        turn("b", 0, [sys_, {"role": "user", "content": "other"}], RecordedOutput(text="x" * 8)),
    ]


def test_counts_and_repeated_prefix_share() -> None:
    turns = sample()
    stats = compute_stats(workload_from_turns(turns))
    texts = [prompt_text(t) for t in turns]
    assert texts[0] == "<system>" + "S" * 30 + "\n<user>fix"
    assert texts[1].startswith(texts[0])  # growing history: the whole previous prompt repeats
    assert (stats.turns, stats.sessions) == (3, 2)
    assert stats.prompt_tokens == 10 + 20 + round(len(texts[2]) / 4) and stats.prompt_estimated == 1
    assert stats.output_tokens == 2 + 3 + 2 and stats.output_estimated == 1
    assert stats.prompt_chars == sum(map(len, texts))
    # Only turn a/1 repeats a previous turn of its session; session b's first turn shares the
    # system prompt with session a, but that is another session, so it does not count.
    assert stats.repeated_prefix_chars == len(texts[0])
    assert stats.repeated_prefix_share == pytest.approx(len(texts[0]) / sum(map(len, texts)))


def test_format_says_what_is_estimated() -> None:
    stats = compute_stats(workload_from_turns(sample()))
    lines = format_stats(stats, "w.jsonl")
    assert lines[2] == "turns          3  (/v1/chat/completions 3)"
    assert lines[4] == f"prompt tokens  {stats.prompt_tokens}  (1 of 3 turns estimated: characters/4)"
    assert lines[5] == "output tokens  7  (1 of 3 turns estimated: characters/4)"
    all_counted = compute_stats(workload_from_turns(sample()[:2]))
    assert format_stats(all_counted, "w")[4] == "prompt tokens  30  (recorded)"


def test_tools_are_part_of_the_prompt_text() -> None:
    t = Turn(
        turn_id="t",
        session_id="s",
        turn_index=0,
        endpoint="/v1/chat/completions",
        request={"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]},
    )
    assert prompt_text(t) == '[{"type": "function"}]\n<user>hi'


def test_cli_stats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "w.jsonl"
    write_trace(path, sample())
    with pytest.raises(SystemExit) as info:
        main(["workload", "stats", str(path)])
    assert info.value.code == 0
    out = capsys.readouterr().out.splitlines()
    assert out == format_stats(compute_stats(load_trace(path)), str(path))
    assert out[1] == f"hash           {load_trace(path).hash}"


def test_cli_stats_bad_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "w.jsonl"
    path.write_text('{"frank_trace": 9}\n')
    with pytest.raises(SystemExit) as info:
        main(["workload", "stats", str(path)])
    assert info.value.code == 1
    assert capsys.readouterr().err == (
        f"frank: error: {path}: line 1: frank_trace: unknown trace version 9 (this frank reads version 1)\n"
    )
