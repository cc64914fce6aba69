"""``frank workload slice`` and ``frank workload sample`` through the real CLI: reproducible from the seed,
stratified, provenance naming the parent, and a design registered on the sample (real SQLite store)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from frankenstein.design.registry import get, register
from frankenstein.workload.sample import allocate, sample_turns
from frankenstein.workload.trace import Turn, load_trace, write_trace

from conftest import frank
from helpers_campaign import make_campaign, write_design

CHAT = "/v1/chat/completions"


def _parent(path: Path, sessions: int = 12) -> Path:
    """Sessions of 1-3 turns with growing prompts; every third session is a /completion one."""
    rows = []
    for s in range(sessions):
        for i in range(1 + s % 3):
            words = "word " * (10 + 40 * s + 5 * i)
            if s % 3 == 2:
                request = {"prompt": words, "cache_prompt": True}
                endpoint = "/completion"
            else:
                request = {"messages": [{"role": "user", "content": words}], "max_tokens": 8}
                endpoint = CHAT
            rows.append(
                Turn(
                    turn_id=f"s{s}-{i}",
                    session_id=f"s{s}",
                    turn_index=i,
                    endpoint=endpoint,
                    request=request,
                    output={"text": "ok", "completion_tokens": 8, "prompt_tokens": 12 + 40 * s + 5 * i},
                    source="test",
                )
            )
    write_trace(path, rows)
    return path


def test_sample_is_reproducible_from_its_seed_and_names_its_parent(tmp_path: Path) -> None:
    parent = _parent(tmp_path / "p.jsonl")
    outs = []
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        out = tmp_path / f"{name}.jsonl"
        r = frank(
            "workload", "sample", str(parent), "--n", "4", "--seed", str(seed), "--strata", "length", "-o", str(out)
        )
        assert r.returncode == 0, r.stderr
        outs.append(load_trace(out))
    assert outs[0].hash == outs[1].hash and outs[0].turns == outs[1].turns
    assert outs[0].hash != outs[2].hash
    # whole sessions, in the parent's order, 4 of them
    assert len(outs[0].sessions) == 4
    order = [t.turn_id for t in load_trace(parent).turns]
    ids = [t.turn_id for t in outs[0].turns]
    assert ids == sorted(ids, key=order.index)
    prov = json.loads((tmp_path / "a.jsonl.provenance.json").read_text())
    assert prov["parent_hash"] == load_trace(parent).hash and prov["seed"] == 7 and prov["hash"] == outs[0].hash
    stats = frank("workload", "stats", str(tmp_path / "a.jsonl"))
    assert f"cut from       {parent}" in stats.stdout and "seed 7" in stats.stdout


def test_a_fresh_seed_is_printed_and_recorded(tmp_path: Path) -> None:
    parent = _parent(tmp_path / "p.jsonl")
    r = frank("workload", "sample", str(parent), "--n", "3", "-o", str(tmp_path / "s.jsonl"))
    assert r.returncode == 0, r.stderr
    seed = int(r.stdout.splitlines()[0].removeprefix("seed "))
    again = frank("workload", "sample", str(parent), "--n", "3", "--seed", str(seed), "-o", str(tmp_path / "t.jsonl"))
    assert again.returncode == 0, again.stderr
    assert load_trace(tmp_path / "s.jsonl").hash == load_trace(tmp_path / "t.jsonl").hash


def test_stratified_sample_takes_every_stratum_in_proportion(tmp_path: Path) -> None:
    wl = load_trace(_parent(tmp_path / "p.jsonl"))
    for seed in range(20):
        cut = sample_turns(wl, 6, seed, "session", "endpoint")
        assert cut.strata == {"/completion": (2, 4), CHAT: (4, 8)}
        eps = list({t.session_id: t.endpoint for t in cut.turns}.values())
        assert eps.count("/completion") == 2 and eps.count(CHAT) == 4
    turns = sample_turns(wl, 5, 1, "turn", "length")
    assert len(turns.turns) == 5 and sum(d for d, _ in turns.strata.values()) == 5


def test_allocation_sums_to_n_and_never_exceeds_a_stratum() -> None:
    for sizes in ({"a": 1, "b": 9}, {"a": 3, "b": 3, "c": 3}, {"x": 5}, {"a": 2, "b": 7, "c": 1}):
        for n in range(1, sum(sizes.values()) + 1):
            counts = allocate(sizes, n)
            assert sum(counts.values()) == n
            assert all(0 <= counts[k] <= sizes[k] for k in sizes)


def test_slice_keeps_what_passes_every_filter(tmp_path: Path) -> None:
    parent = _parent(tmp_path / "p.jsonl")
    out = tmp_path / "s.jsonl"
    r = frank(
        "workload", "slice", str(parent), "--turns", "1-", "--max-tokens", "300", "--endpoint", "chat", "-o", str(out)
    )
    assert r.returncode == 0, r.stderr
    kept = load_trace(out).turns
    assert kept and all(t.turn_index >= 1 and t.endpoint == CHAT and t.output.prompt_tokens <= 300 for t in kept)
    expected = [
        t.turn_id
        for t in load_trace(parent).turns
        if t.turn_index >= 1 and t.endpoint == CHAT and (t.output.prompt_tokens or 0) <= 300
    ]
    assert [t.turn_id for t in kept] == expected


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sample", "--n", "0"], "--n 0: the workload has 12 sessions; give 1 to 12"),
        (["sample", "--n", "13"], "--n 13: the workload has 12 sessions"),
        (["slice", "--turns", "x-y"], "'x-y': expected A-B"),
        (["slice", "--endpoint", "embeddings"], "--endpoint 'embeddings': expected one of chat"),
        (["slice", "--min-tokens", "1000000"], "no turn passes the filters given"),
    ],
)
def test_bad_cuts_are_one_clear_message_and_write_nothing(tmp_path: Path, args: list[str], message: str) -> None:
    parent = _parent(tmp_path / "p.jsonl")
    out = tmp_path / "out.jsonl"
    r = frank("workload", args[0], str(parent), *args[1:], "-o", str(out))
    assert r.returncode != 0 and message in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()


def test_missing_output_folder_is_named(tmp_path: Path) -> None:
    parent = _parent(tmp_path / "p.jsonl")
    out = tmp_path / "nowhere" / "s.jsonl"
    r = frank("workload", "sample", str(parent), "--n", "2", "--seed", "1", "-o", str(out))
    assert r.returncode != 0 and f"the folder {out.parent} does not exist" in r.stderr


def test_a_design_registers_on_a_sample(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path / "c")
    try:
        parent = _parent(tmp_path / "p.jsonl")
        out = camp.root / "workloads" / "s.jsonl"
        r = frank("workload", "sample", str(parent), "--n", "4", "--seed", "3", "-o", str(out))
        assert r.returncode == 0, r.stderr
        reg = register(camp, write_design(camp.root / "d.toml", workload="workloads/s.jsonl"))
        assert get(camp, reg.design_id).frozen.workload_hash == load_trace(out).hash
    finally:
        camp.close()
