"""TEST DOUBLE: a deterministic scripted model server for agent tests.

No model that can solve the shipped tasks runs on these machines, so tests drive the *real* agent
loop, sandbox and graders with this OpenAI-compatible HTTP server on 127.0.0.1 instead of a model.
It plays a fixed trajectory: each ``POST /v1/chat/completions`` gets the next scripted answer (tool
calls, plain text, an HTTP error, or a delay first), whatever the request says. Every request body it
receives is kept, so a test can compare them with the trace the loop wrote.

It is a stand-in for a model, not a model: it never looks at the conversation, and a correct
trajectory passes only because the loop, sandbox and grader really did their work.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Step:
    """One scripted answer. ``calls`` are (tool name, arguments: a dict, or a raw string sent as is)."""

    calls: tuple[tuple[str, Any], ...] = ()
    text: str = ""
    status: int = 200
    error_body: str = ""
    delay_s: float = 0.0
    usage: dict[str, int] | None = None
    finish_reason: str | None = None
    timings: dict[str, float] | None = None


def call(name: str, **args: Any) -> Step:
    """A step with one tool call."""
    return Step(calls=((name, args),))


def raw_call(name: str, arguments: str) -> Step:
    """A step whose tool-call arguments are sent verbatim (e.g. broken JSON)."""
    return Step(calls=((name, arguments),))


@dataclass
class _Script:
    steps: list[Step]
    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next(self, body: dict[str, Any]) -> Step | None:
        with self.lock:
            self.requests.append(body)
            return self.steps.pop(0) if self.steps else None


def answer(step: Step, n: int, body: dict[str, Any]) -> dict[str, Any]:
    """The OpenAI-shaped JSON for a step (the ``n``-th request)."""
    calls = [
        {
            "id": f"call_{n}_{i}",
            "type": "function",
            "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)},
        }
        for i, (name, args) in enumerate(step.calls)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": step.text or None}
    if calls:
        message["tool_calls"] = calls
    prompt = len(json.dumps(body.get("messages", []))) // 4
    usage = step.usage or {
        "prompt_tokens": prompt,
        "completion_tokens": 10 + 5 * len(calls),
        "total_tokens": prompt + 10 + 5 * len(calls),
    }
    out: dict[str, Any] = {
        "id": f"chatcmpl-scripted-{n}",
        "object": "chat.completion",
        "created": 0,
        "model": str(body.get("model")),
        "choices": [
            {"index": 0, "message": message, "finish_reason": step.finish_reason or ("tool_calls" if calls else "stop")}
        ],
        "usage": usage,
    }
    if step.timings is not None:
        out["timings"] = step.timings
    return out


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - keep test output clean
        pass

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != "/v1/chat/completions":
            return self._send(404, b'{"error": "not found"}')
        body = json.loads(raw)
        step = self.server.script.next(body)
        if step is None:
            return self._send(500, b'{"error": {"message": "scripted model: the script is finished"}}')
        if step.delay_s:
            time.sleep(step.delay_s)
        if step.status != 200:
            return self._send(step.status, step.error_body.encode())
        n = len(self.server.script.requests)
        self._send(200, json.dumps(answer(step, n, body)).encode())

    def _send(self, status: int, data: bytes) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a time limit): nothing to tell it


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, script: _Script) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script = script


class ScriptedModelServer:
    """TEST DOUBLE (see the module docstring). Use as a context manager::

    with ScriptedModelServer([call("bash", command="ls"), call("submit")]) as srv:
        run_draw(srv.base_url, ...)
        srv.requests   # the bodies received, in order
    """

    def __init__(self, steps: Sequence[Step]) -> None:
        self.script = _Script(list(steps))
        self.httpd = _Server(self.script)
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="scripted-model", daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}" if isinstance(host, str) else f"http://{host.decode()}:{port}"

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self.script.requests

    @property
    def steps_left(self) -> int:
        return len(self.script.steps)

    def __enter__(self) -> ScriptedModelServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


PASS_IF_ANSWER_42 = """import sys
from pathlib import Path
text = (Path(sys.argv[1]) / "answer.txt").read_text().strip() if (Path(sys.argv[1]) / "answer.txt").exists() else ""
print("answer:", text)
sys.exit(0 if text == "42" else 1)
"""


def write_task(
    folder: Path,
    task_id: str,
    *,
    grader: str = PASS_IF_ANSWER_42,
    toml_extra: str = "",
    workspace: dict[str, str] | None = None,
    oracle: dict[str, str] | None = None,
    prompt: str = "Write 42 into answer.txt, then call submit.\n",
) -> Path:
    """A minimal task folder for tests: by default the grader passes when answer.txt says 42."""
    root = Path(folder) / task_id
    for name, files in (
        ("workspace", workspace or {"README.md": "a test task\n"}),
        ("oracle", oracle or {"answer.txt": "42\n"}),
        ("grader", {"grade.py": grader}),
    ):
        for rel, text in files.items():
            path = root / name / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    (root / "task.toml").write_text(f'id = "{task_id}"\nversion = 1\n{toml_extra}')
    (root / "prompt.md").write_text(prompt)
    return root
