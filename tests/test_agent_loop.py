"""The agent loop through the real sandbox and graders, driven by the scripted model server (a TEST
DOUBLE: no model that can solve the tasks runs here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from frankenstein.agent import load_suite, run_draw, shipped_suite
from frankenstein.agent.loop import STATUSES, SYSTEM_PROMPT, TOOLS
from frankenstein.agent.sandbox import detect_isolation
from frankenstein.agent.scripted import ScriptedModelServer, Step, call, raw_call, write_task
from frankenstein.agent.tasks import load_task
from frankenstein.errors import ConfigError
from frankenstein.store import Store
from frankenstein.workload.trace import load_trace, request_bytes

SUITE = shipped_suite()


def oracle_steps(task_id: str) -> list[Step]:
    """A correct trajectory: look around, write every oracle file, run a command, submit."""
    oracle = SUITE / task_id / "oracle"
    steps = [call("bash", command="ls -la")]
    for path in sorted(p for p in oracle.rglob("*") if p.is_file()):
        steps.append(call("write_file", path=path.relative_to(oracle).as_posix(), content=path.read_text()))
    return [*steps, call("bash", command="ls"), call("submit", summary="done")]


def wrong_steps(task_id: str) -> list[Step]:
    """An incorrect trajectory: plausible work that does not solve the task."""
    wrong = {
        "fix-ledger-month": ("ledger/report.py", "# rewritten\n"),
        "latency-report": ("report.json", '{"endpoints": {}, "slowest_endpoint": "/api/cart", "skipped_lines": 0}'),
        "log-incident": (
            "answer.json",
            '{"incident_shard": "db-shard-5", "first_open": "x", "failed_requests": 1, "top_user": "u1000"}',
        ),
        "regression-csvstats": ("REGRESSION.txt", "percentile\n"),
        "spec-durations": ("durations.py", "def parse_duration(t):\n    return 0\n"),
        "todo-feature": ("todo/cli.py", "def main(argv):\n    return 0\n"),
    }[task_id]
    return [
        call("bash", command="head -5 README.md || ls"),
        call("write_file", path=wrong[0], content=wrong[1]),
        call("submit"),
    ]


def test_correct_draw_passes_every_task(tmp_path: Path) -> None:
    tasks = load_suite(SUITE)
    steps = [s for t in sorted(t.id for t in tasks) for s in oracle_steps(t)]
    with ScriptedModelServer(steps) as srv:
        results = run_draw(srv.base_url, SUITE, None, 0, tmp_path / "trace.jsonl", tmp_path / "work")
        assert srv.steps_left == 0
    assert [r.task_id for r in results] == sorted(t.id for t in tasks)
    assert [(r.status, r.passed, r.grader_rc) for r in results] == [("submitted", True, 0)] * 6
    assert {r.task_hash for r in results} == {t.hash for t in tasks}
    assert load_trace(tmp_path / "trace.jsonl").turns[0].session_id == f"{results[0].task_id}-d0"


def test_incorrect_draw_fails_every_task(tmp_path: Path) -> None:
    tasks = load_suite(SUITE)
    steps = [s for t in sorted(t.id for t in tasks) for s in wrong_steps(t)]
    with ScriptedModelServer(steps) as srv:
        results = run_draw(srv.base_url, SUITE, tasks, 3, tmp_path / "trace.jsonl", tmp_path / "work")
    assert [(r.status, r.passed, r.grader_rc, r.turns) for r in results] == [("submitted", False, 1, 3)] * 6
    assert all(r.draw == 3 for r in results)
    ledger = next(r for r in results if r.task_id == "fix-ledger-month")
    assert "FAIL test_last_day_of_month_counted" in ledger.detail["grader"]["output"]


def test_results_fit_the_episodes_table(tmp_path: Path) -> None:
    task = load_task(write_task(tmp_path / "suite", "t42"))
    with ScriptedModelServer([call("write_file", path="answer.txt", content="42"), call("submit")]) as srv:
        [res] = run_draw(srv.base_url, tmp_path / "suite", [task], 0, tmp_path / "t.jsonl", tmp_path / "w")
    with Store(tmp_path / "frank.db") as store:
        store.insert_start(
            arm="served", status="ok", started_at="2024-01-01T00:00:00.000Z", metrics={}, episodes=[res.row()]
        )
        row = store.query("SELECT task_id, draw, task_hash, status, passed, grader_rc, turns, detail FROM episodes")[0]
    assert tuple(row)[:7] == ("t42", 0, task.hash, "submitted", 1, 0, 2)
    assert json.loads(row["detail"])["grader"]["verdict"] == "pass"


def test_trace_holds_exact_requests_and_answers(tmp_path: Path) -> None:
    task = load_task(write_task(tmp_path / "suite", "t42"))
    timings = {"prompt_n": 120, "prompt_ms": 8.5, "predicted_n": 9, "predicted_ms": 30.0}
    steps = [
        Step(calls=(("bash", {"command": "echo hello"}),), text="let me look", timings=timings),
        call("write_file", path="answer.txt", content="42"),
        call("submit", summary="ok"),
    ]
    with ScriptedModelServer(steps) as srv:
        run_draw(
            srv.base_url,
            tmp_path / "suite",
            [task],
            1,
            tmp_path / "t.jsonl",
            tmp_path / "w",
            model="m1",
            temperature=0.5,
            seed=11,
        )
        received = srv.requests
    turns = load_trace(tmp_path / "t.jsonl").turns
    assert len(turns) == len(received) == 3
    for turn, body in zip(turns, received):
        assert request_bytes(turn) == json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        assert (turn.endpoint, turn.source, turn.session_id) == ("/v1/chat/completions", "agent", "t42-d1")
    first = turns[0]
    assert first.request["messages"][:2] == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": task.prompt},
    ]
    assert (first.request["model"], first.request["temperature"], first.request["seed"]) == ("m1", 0.5, 11)
    assert first.request["tools"] == TOOLS and first.request["max_tokens"] == 2048
    assert first.output.text == "let me look" and first.output.finish_reason == "tool_calls"
    assert [(c.name, json.loads(c.arguments)) for c in first.output.tool_calls] == [("bash", {"command": "echo hello"})]
    assert first.output.completion_tokens == 15 and first.output.prompt_tokens > 0
    assert first.timings.server == timings and first.timings.e2e_ms is not None
    tool_msg = turns[1].request["messages"][-1]
    assert tool_msg["role"] == "tool" and tool_msg["content"] == "exit code: 0\nhello\n"


def _one(tmp_path: Path, steps: list[Step], toml_extra: str = "", grader: str | None = None, **kw: object):
    extra = {"grader": grader} if grader else {}
    task = load_task(write_task(tmp_path / "suite", "t42", toml_extra=toml_extra, **extra))
    with ScriptedModelServer(steps) as srv:
        [res] = run_draw(srv.base_url, tmp_path / "suite", [task], 0, tmp_path / "t.jsonl", tmp_path / "w", **kw)
        return res, srv


def test_turn_limit(tmp_path: Path) -> None:
    res, srv = _one(tmp_path, [call("bash", command="true")] * 5, "[limits]\nturns = 3\n")
    assert (res.status, res.turns, res.passed, res.grader_rc) == ("turn_limit", 3, False, 1)
    assert srv.steps_left == 2


def test_work_done_before_the_turn_limit_still_counts(tmp_path: Path) -> None:
    res, _ = _one(
        tmp_path,
        [call("write_file", path="answer.txt", content="42"), call("bash", command="true")],
        "[limits]\nturns = 2\n",
    )
    assert (res.status, res.passed) == ("turn_limit", True)


def test_format_errors_in_a_row(tmp_path: Path) -> None:
    steps = [
        Step(text="I think the answer is 42."),
        raw_call("bash", "{not json"),
        call("fly", to="moon"),
        call("bash", wrong_arg="ls"),
    ]
    res, srv = _one(tmp_path, steps, "[limits]\nformat_errors = 3\n")
    assert (res.status, res.turns, res.detail["format_errors"]) == ("format_error", 3, 3)
    nudges = [m for m in srv.requests[1]["messages"] if m["role"] == "user"]
    assert nudges[-1]["content"].startswith("Your answer had no usable tool call")
    assert "not valid JSON" in srv.requests[2]["messages"][-1]["content"]


def test_a_good_call_resets_the_format_count(tmp_path: Path) -> None:
    steps = [
        Step(text="hm"),
        Step(text="hm"),
        call("bash", command="true"),
        Step(text="hm"),
        Step(text="hm"),
        call("write_file", path="answer.txt", content="42"),
        call("submit"),
    ]
    res, _ = _one(tmp_path, steps, "[limits]\nformat_errors = 3\n")
    assert (res.status, res.passed, res.detail["format_errors"]) == ("submitted", True, 4)


def test_context_limit_from_usage(tmp_path: Path) -> None:
    big = Step(calls=(("bash", {"command": "true"}),), usage={"prompt_tokens": 5000, "completion_tokens": 20})
    res, _ = _one(tmp_path, [call("bash", command="true"), big, call("submit")], "[limits]\ncontext_tokens = 4096\n")
    assert (res.status, res.turns) == ("context_limit", 2)


def test_context_limit_from_an_engine_refusal(tmp_path: Path) -> None:
    refusal = Step(
        status=400,
        error_body='{"error": {"code": 400, "message": "the request exceeds the available '
        'context size, try increasing it", "type": "exceed_context_size_error"}}',
    )
    res, _ = _one(tmp_path, [call("bash", command="true"), refusal])
    assert (res.status, res.turns) == ("context_limit", 1)
    assert "HTTP 400" in res.detail["stop_reason"]


def test_engine_error(tmp_path: Path) -> None:
    res, _ = _one(tmp_path, [call("bash", command="true"), Step(status=500, error_body="boom")])
    assert (res.status, res.turns, res.passed) == ("engine_error", 1, False)
    assert res.detail["stop_reason"] == "HTTP 500: boom"


def test_engine_unreachable(tmp_path: Path) -> None:
    task = load_task(write_task(tmp_path / "suite", "t42"))
    with ScriptedModelServer([]) as srv:
        url = srv.base_url
    [res] = run_draw(url, tmp_path / "suite", [task], 0, tmp_path / "t.jsonl", tmp_path / "w")
    assert (res.status, res.turns, res.grader_rc) == ("engine_error", 0, 1)
    assert not (tmp_path / "t.jsonl").exists()


def test_time_limit_during_a_request(tmp_path: Path) -> None:
    res, _ = _one(tmp_path, [call("bash", command="true"), Step(delay_s=3.0)], "[limits]\nwall_time_s = 1.0\n")
    assert (res.status, res.turns) == ("time_limit", 1)


def test_time_limit_during_a_command(tmp_path: Path) -> None:
    res, _ = _one(
        tmp_path,
        [call("bash", command="sleep 30"), call("submit")],
        "[limits]\nwall_time_s = 1.5\ncommand_timeout_s = 60\n",
    )
    assert (res.status, res.turns) == ("time_limit", 1)
    assert res.detail["commands"][0]["timed_out"] is True and res.detail["commands"][0]["seconds"] < 5


def test_grader_error_is_recorded_apart(tmp_path: Path) -> None:
    res, _ = _one(tmp_path, [call("submit")], grader="import sys\nprint('grader broke')\nsys.exit(3)\n")
    assert (res.status, res.passed, res.grader_rc) == ("grader_error", False, 3)
    assert res.detail["stop"] == "submitted" and res.detail["grader"]["verdict"] == "error"


def test_grader_timeout_is_a_grader_error(tmp_path: Path) -> None:
    res, _ = _one(tmp_path, [call("submit")], "[grader]\ntimeout_s = 1\n", grader="import time\ntime.sleep(60)\n")
    assert (res.status, res.grader_rc) == ("grader_error", None)
    assert res.detail["grader"]["timed_out"] is True


def test_limit_overrides_apply_and_are_recorded(tmp_path: Path) -> None:
    res, srv = _one(tmp_path, [call("bash", command="true")] * 3, limit_overrides={"turns": 1, "output_tokens": 7})
    assert (res.status, res.turns) == ("turn_limit", 1)
    assert srv.requests[0]["max_tokens"] == 7 and res.detail["limits"]["turns"] == 1


def test_statuses_are_the_documented_ones() -> None:
    assert STATUSES == (
        "submitted",
        "turn_limit",
        "context_limit",
        "time_limit",
        "format_error",
        "engine_error",
        "grader_error",
        "workspace_limit",
    )


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"turns": 0}, "limit overrides: turns: Input should be greater than or equal to 1"),
        ({"nonsense": 1}, "limit overrides: nonsense: unknown limit"),
    ],
)
def test_bad_limit_overrides_are_refused(tmp_path: Path, bad: dict[str, int], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        _one(tmp_path, [], limit_overrides=bad)
    assert str(err.value) == message


def test_cli_draw(tmp_path: Path) -> None:
    import subprocess
    import sys

    write_task(tmp_path / "suite", "t42")
    steps = [call("write_file", path="answer.txt", content="42"), call("submit")]
    with ScriptedModelServer(steps) as srv:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "frankenstein",
                "tasks",
                "draw",
                srv.base_url,
                "--suite",
                str(tmp_path / "suite"),
                "--trace",
                str(tmp_path / "t.jsonl"),
                "--work-dir",
                str(tmp_path / "w"),
                "--draw",
                "2",
                "--turns",
                "5",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0] == detect_isolation().summary()  # which sandbox and quota the draw ran under
    row = json.loads(done.stdout)
    assert {k: row[k] for k in ("task_id", "draw", "status", "passed", "grader_rc", "turns")} == {
        "task_id": "t42",
        "draw": 2,
        "status": "submitted",
        "passed": True,
        "grader_rc": 0,
        "turns": 2,
    }
    assert len(load_trace(tmp_path / "t.jsonl").turns) == 2
