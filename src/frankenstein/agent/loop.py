"""The agent loop: OpenAI chat completions with native tool calling, one request at a time.

Each request goes to ``POST {base_url}/v1/chat/completions`` with the tools ``bash``, ``read_file``,
``write_file`` and ``submit``; every answer is appended to the trace as it arrives (a workload turn:
the exact request body, the text, tool calls, finish reason, usage and server timings), so an
agent run is a recorded workload. The loop stops with one status:

``submitted``      the model called ``submit``
``turn_limit``     ``limits.turns`` requests were made without a submit
``context_limit``  prompt + completion passed ``limits.context_tokens``, or the engine refused the
                   prompt as too long
``time_limit``     ``limits.wall_time_s`` ran out (requests and commands share it)
``format_error``   ``limits.format_errors`` answers in a row without a usable tool call
``engine_error``   the engine could not be reached or answered an error / no JSON
``workspace_limit`` the workspace holds more than ``sandbox.workspace_mb`` on disk after a tool call

(``grader_error`` is set later, by grading.) Statuses are outcomes, not exceptions: every episode
ends with one and is counted.

A tool call never ends the draw: every argument the model controls (a path with a NUL, a lone surrogate
or a 300-character name, a path under a file, a symlink loop, a FIFO, a command with a NUL) comes back to
the model as ``error: ...``, and text sent back is made valid UTF-8 first (the trace must encode it).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from frankenstein.agent.sandbox import Sandbox, ToolRefused
from frankenstein.agent.tasks import Limits
from frankenstein.engines.http import Answer, TransportError, fetch, split_url
from frankenstein.errors import EngineFailure, SandboxError
from frankenstein.engines.response import output_from_response, server_timings
from frankenstein.workload.trace import CHAT, RecordedTimings, Turn, append_turn, make_turn_id

SUBMITTED, TURN_LIMIT, CONTEXT_LIMIT, TIME_LIMIT = "submitted", "turn_limit", "context_limit", "time_limit"
FORMAT_ERROR, ENGINE_ERROR, GRADER_ERROR = "format_error", "engine_error", "grader_error"
WORKSPACE_LIMIT = "workspace_limit"
STATUSES = (
    SUBMITTED,
    TURN_LIMIT,
    CONTEXT_LIMIT,
    TIME_LIMIT,
    FORMAT_ERROR,
    ENGINE_ERROR,
    GRADER_ERROR,
    WORKSPACE_LIMIT,
)

SYSTEM_PROMPT = """You are a careful software engineer working in a sandboxed Linux workspace.
Your current directory is the workspace; the task below says what to do there.
Tools: `bash` runs one shell command (a fresh shell each time: `cd` and variables do not carry over;
long output is cut in the middle), `read_file` and `write_file` read and write files in the workspace
(paths relative to it). There is no network. When the task is done, call `submit`.
Always answer with a tool call."""


def _fn(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


TOOLS: list[dict[str, Any]] = [
    _fn(
        "bash",
        "Run a bash command in the workspace and return its exit code and output.",
        {"command": {"type": "string", "description": "The command line to run."}},
        ["command"],
    ),
    _fn(
        "read_file",
        "Return the text of a file in the workspace (long files are cut in the middle).",
        {"path": {"type": "string", "description": "Path relative to the workspace."}},
        ["path"],
    ),
    _fn(
        "write_file",
        "Create or replace a file in the workspace with the given text.",
        {
            "path": {"type": "string", "description": "Path relative to the workspace."},
            "content": {"type": "string", "description": "The whole new file content."},
        },
        ["path", "content"],
    ),
    _fn(
        "submit",
        "Finish the task: call this once the work in the workspace is complete.",
        {"summary": {"type": "string", "description": "One line on what you did."}},
        [],
    ),
]
REQUIRED_ARGS = {t["function"]["name"]: tuple(t["function"]["parameters"]["required"]) for t in TOOLS}
FORMAT_NUDGE = (
    "Your answer had no usable tool call. Answer with exactly one call of bash, read_file, write_file or submit."
)
MAX_COMMANDS_KEPT = 200


class ChatClient:
    """The one place the agent talks HTTP to the engine, through the engines' stdlib client
    (:mod:`frankenstein.engines.http`, a fresh connection per request)."""

    def __init__(self, base_url: str, *, api_key: str | None = None) -> None:
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.url = base_url.rstrip("/") + CHAT
        self.host, self.port, self.path = split_url(self.url)

    def close(self) -> None:
        """Nothing is held between requests."""

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def complete(self, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        try:
            resp = fetch(
                self.host,
                self.port,
                "POST",
                self.path,
                json.dumps(body).encode(),
                timeout_s=timeout_s,
                headers=self.headers,
            )
        except TimeoutError as exc:
            raise EngineFailure(TIME_LIMIT, f"no answer within the {timeout_s:.0f} s left") from exc
        except TransportError as exc:
            raise EngineFailure(ENGINE_ERROR, f"request failed: {exc!r}") from exc
        if resp.status_code != 200:
            raise _http_failure(resp)
        try:
            data = resp.json()
        except ValueError as exc:
            raise EngineFailure(ENGINE_ERROR, f"answer is not JSON: {resp.text[:300]!r}") from exc
        if not isinstance(data, dict) or not data.get("choices"):
            raise EngineFailure(ENGINE_ERROR, f"answer has no choices: {resp.text[:300]!r}")
        return data


def _http_failure(resp: Answer) -> EngineFailure:
    text = resp.text[:500]
    too_long = resp.status_code in (400, 413) and any(
        w in text.lower() for w in ("context", "too long", "exceed", "maximum")
    )
    status = CONTEXT_LIMIT if too_long else ENGINE_ERROR
    return EngineFailure(status, f"HTTP {resp.status_code}: {text}")


@dataclass
class AgentRun:
    """What the loop leaves behind for grading and the episode record."""

    status: str
    turns: int
    reason: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class _State:
    messages: list[dict[str, Any]]
    started: float
    turns: int = 0
    bad_in_a_row: int = 0
    format_errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tool_counts: dict[str, int] = field(default_factory=dict)
    refusals: list[str] = field(default_factory=list)
    commands: list[dict[str, Any]] = field(default_factory=list)
    submitted: str | None = None


class AgentLoop:
    """One episode's conversation. ``session_id`` names it in the trace."""

    def __init__(
        self,
        client: ChatClient,
        sandbox: Sandbox,
        limits: Limits,
        trace_path: Path,
        session_id: str,
        *,
        model: str,
        temperature: float = 0.0,
        seed: int | None = None,
    ) -> None:
        self.client, self.sandbox, self.limits = client, sandbox, limits
        self.trace_path, self.session_id = trace_path, session_id
        self.model, self.temperature, self.seed = model, temperature, seed

    def run(self, prompt: str) -> AgentRun:
        st = _State(
            messages=[{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": prompt}],
            started=time.monotonic(),
        )
        status, reason = self._loop(st)
        detail = {
            "stop_reason": reason,
            "format_errors": st.format_errors,
            "tool_calls": st.tool_counts,
            "refusals": st.refusals,
            "commands": st.commands[:MAX_COMMANDS_KEPT],
            "usage": {"last_prompt_tokens": st.prompt_tokens, "completion_tokens": st.completion_tokens},
            "wall_s": round(time.monotonic() - st.started, 3),
            "submit_summary": st.submitted,
            "trace_session": self.session_id,
        }
        return AgentRun(status=status, turns=st.turns, reason=reason, detail=detail)

    def _left(self, st: _State) -> float:
        return self.limits.wall_time_s - (time.monotonic() - st.started)

    def _loop(self, st: _State) -> tuple[str, str]:
        while st.turns < self.limits.turns:
            if self._left(st) <= 0:
                return TIME_LIMIT, f"wall time of {self.limits.wall_time_s:.0f} s used up"
            try:
                answer = self._request(st)
            except EngineFailure as exc:
                return exc.status, str(exc)
            stop = self._handle(st, answer)
            if stop is not None:
                return stop
        return TURN_LIMIT, f"{self.limits.turns} turns without a submit"

    def _request(self, st: _State) -> dict[str, Any]:
        body = {
            "model": self.model,
            "messages": st.messages,
            "tools": TOOLS,
            "tool_choice": "auto",
            "max_tokens": self.limits.output_tokens,
            "temperature": self.temperature,
            "stream": False,
        }
        if self.seed is not None:
            body["seed"] = self.seed
        t0 = time.monotonic()
        answer = valid_json(self.client.complete(body, timeout_s=max(self._left(st), 0.001)))
        e2e_ms = (time.monotonic() - t0) * 1000
        write_trace_turn(self.trace_path, self._turn(body, answer, st.turns, e2e_ms))
        st.turns += 1
        return answer

    def _turn(self, body: dict[str, Any], answer: dict[str, Any], index: int, e2e_ms: float) -> Turn:
        # ``body`` is serialised now, before the history grows: the trace keeps this request's bytes.
        request = json.loads(json.dumps(body))
        return Turn(
            turn_id=make_turn_id(self.session_id, index),
            session_id=self.session_id,
            turn_index=index,
            endpoint=CHAT,
            request=request,
            output=output_from_response(CHAT, answer),
            timings=RecordedTimings(server=server_timings(answer), e2e_ms=round(e2e_ms, 3)),
            recorded_at=time.time(),
            source="agent",
        )

    def _handle(self, st: _State, answer: dict[str, Any]) -> tuple[str, str] | None:
        choice = answer["choices"][0]
        message = choice.get("message") or {}
        usage = answer.get("usage") or {}
        st.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        st.completion_tokens += int(usage.get("completion_tokens") or 0)
        calls = _normalise_calls(message.get("tool_calls"), st.turns)
        st.messages.append(_assistant_message(message, calls))
        if st.prompt_tokens + int(usage.get("completion_tokens") or 0) > self.limits.context_tokens:
            return CONTEXT_LIMIT, f"{st.prompt_tokens} prompt + completion tokens passed {self.limits.context_tokens}"
        if not calls:
            return self._format_error(st, f"no tool call (finish reason {choice.get('finish_reason')!r})")
        bad = 0
        for call in calls:
            result, ok = self._call_tool(st, call)
            st.messages.append({"role": "tool", "tool_call_id": call["id"], "content": valid_text(result)})
            bad += not ok
            if st.submitted is not None:
                return SUBMITTED, "the model called submit"
            over = self.sandbox.quota_problem()
            if over is not None:
                return WORKSPACE_LIMIT, over
        if bad == len(calls):
            return self._format_error(st, None)
        st.bad_in_a_row = 0
        return None

    def _format_error(self, st: _State, note: str | None) -> tuple[str, str] | None:
        st.format_errors += 1
        st.bad_in_a_row += 1
        if note is not None:
            st.messages.append({"role": "user", "content": FORMAT_NUDGE})
        if st.bad_in_a_row >= self.limits.format_errors:
            return FORMAT_ERROR, f"{st.bad_in_a_row} answers in a row without a usable tool call"
        return None

    def _call_tool(self, st: _State, call: dict[str, Any]) -> tuple[str, bool]:
        """Run one tool call; returns (text for the model, whether the call was well-formed)."""
        name = call["function"]["name"]
        st.tool_counts[name] = st.tool_counts.get(name, 0) + 1
        try:
            args = json.loads(call["function"]["arguments"] or "{}")
        except json.JSONDecodeError as exc:
            return f"error: the arguments are not valid JSON ({exc})", False
        if name not in REQUIRED_ARGS:
            return f"error: unknown tool {name!r}; use bash, read_file, write_file or submit", False
        if not isinstance(args, dict) or any(not isinstance(args.get(k), str) for k in REQUIRED_ARGS[name]):
            return f"error: {name} needs the string argument(s) {', '.join(REQUIRED_ARGS[name])}", False
        try:
            return self._dispatch(st, name, args), True
        except ToolRefused as exc:
            st.refusals.append(valid_text(f"{name}: {exc}"))
            return f"error: {exc}", True

    def _dispatch(self, st: _State, name: str, args: dict[str, Any]) -> str:
        if name == "submit":
            st.submitted = str(args.get("summary", ""))[:500]
            return "submitted"
        if name == "read_file":
            return self.sandbox.read_file(args["path"])
        if name == "write_file":
            n = self.sandbox.write_file(args["path"], args["content"])
            return f"wrote {n} bytes to {args['path']}"
        return self._bash(st, args["command"])

    def _bash(self, st: _State, command: str) -> str:
        timeout = min(self.limits.command_timeout_s, max(self._left(st), 0.5))
        check_command_text(command)
        try:
            res = self.sandbox.run(command, timeout_s=timeout)
        except SandboxError as exc:  # the sandbox could not start this command: the model hears why
            raise ToolRefused(f"the command could not be started: {exc}") from None
        st.commands.append({"command": valid_text(command[:300]), **res.as_dict()})
        head = "exit code: killed" if res.rc is None else f"exit code: {res.rc}"
        return f"{head}\n{res.output}"


def valid_text(text: str) -> str:
    """``text`` as valid UTF-8 (a lone surrogate becomes ``?``): the trace and the next request encode it."""
    return text.encode("utf-8", "replace").decode("utf-8")


def valid_json(obj: dict[str, Any]) -> dict[str, Any]:
    """An engine's answer with every string made valid UTF-8: a model can emit a lone surrogate (``\\ud800``)
    in its text or tool arguments, and every later request and trace line carries it."""
    out: dict[str, Any] = json.loads(valid_text(json.dumps(obj, ensure_ascii=False)))
    return out


def check_command_text(command: str) -> None:
    """A command the shell can be given: no NUL (``execve`` cannot pass one), valid UTF-8 text."""
    if "\x00" in command:
        raise ToolRefused("a command may not hold a NUL byte")
    try:
        command.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolRefused(f"the command is not valid text ({exc.reason} at character {exc.start})") from None


def _normalise_calls(raw: Any, turn: int) -> list[dict[str, Any]]:
    """OpenAI-shaped tool calls with an id each (some engines leave it empty)."""
    calls = []
    for i, c in enumerate(raw or []):
        fn = (c or {}).get("function") or {}
        args = fn.get("arguments")
        calls.append(
            {
                "id": c.get("id") or f"call_{turn}_{i}",
                "type": "function",
                "function": {
                    "name": str(fn.get("name") or ""),
                    "arguments": args if isinstance(args, str) else json.dumps(args or {}),
                },
            }
        )
    return calls


def _assistant_message(message: dict[str, Any], calls: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    if calls:
        out["tool_calls"] = calls
    return out


def write_trace_turn(path: Path, turn: Turn) -> None:
    """The one place trace lines are written (atomic append from the workload module)."""
    append_turn(path, turn)
