"""``frank workload stats``: what a workload asks of an engine, from the recording alone (pure).

Token totals come from the recorded counts; a turn without a recorded count is estimated as
characters / 4 and the line says how many turns were estimated. The repeated-prefix share is the
share of prompt characters that repeat the previous turn of the same session as a prefix: per turn,
the longest common prefix of its prompt text and the previous turn's prompt text, summed over all
turns, divided by all prompt characters. It is counted in characters of a flattened prompt (tools,
then each message as role + content), not in tokens of a chat template: an estimate of what a
prefix cache can reuse, not a measurement.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from frankenstein.workload.trace import Turn, Workload

CHARS_PER_TOKEN = 4


@dataclass(frozen=True)
class WorkloadStats:
    turns: int
    sessions: int
    prompt_tokens: int
    prompt_estimated: int  # turns whose prompt count is estimated
    output_tokens: int
    output_estimated: int
    prompt_chars: int
    repeated_prefix_chars: int
    endpoints: dict[str, int]
    hash: str

    @property
    def repeated_prefix_share(self) -> float:
        return self.repeated_prefix_chars / self.prompt_chars if self.prompt_chars else 0.0


def prompt_text(turn: Turn) -> str:
    """The prompt flattened to text: tool definitions first (they are sent every turn), then each
    message's role and content; for completions, the prompt itself."""
    req = turn.request
    if "messages" in req:
        parts = [json.dumps(req["tools"], sort_keys=True)] if req.get("tools") else []
        for m in req["messages"]:
            content = m.get("content") if isinstance(m, dict) else m
            text = content if isinstance(content, str) else json.dumps(content, sort_keys=True)
            tool_calls = (
                json.dumps(m.get("tool_calls"), sort_keys=True) if isinstance(m, dict) and m.get("tool_calls") else ""
            )
            parts.append(f"<{m.get('role', '') if isinstance(m, dict) else ''}>{text}{tool_calls}")
        return "\n".join(parts)
    prompt: Any = req.get("prompt", "")
    return prompt if isinstance(prompt, str) else json.dumps(prompt)


def _estimate(chars: int) -> int:
    return max(1, round(chars / CHARS_PER_TOKEN))


def compute_stats(workload: Workload) -> WorkloadStats:
    prev: dict[str, str] = {}
    prompt_tokens = prompt_est = output_tokens = output_est = chars = repeated = 0
    endpoints: dict[str, int] = {}
    for turn in workload.turns:
        text = prompt_text(turn)
        chars += len(text)
        if turn.session_id in prev:
            repeated += len(os.path.commonprefix([prev[turn.session_id], text]))
        prev[turn.session_id] = text
        endpoints[turn.endpoint] = endpoints.get(turn.endpoint, 0) + 1
        out = turn.output
        if out.prompt_tokens is None:
            prompt_est += 1
        prompt_tokens += out.prompt_tokens if out.prompt_tokens is not None else _estimate(len(text))
        if out.completion_tokens is None:
            output_est += 1
        output_tokens += (
            out.completion_tokens
            if out.completion_tokens is not None
            else _estimate(
                len(out.text) + len(out.reasoning) + sum(len(c.arguments) + len(c.name) for c in out.tool_calls)
            )
        )
    return WorkloadStats(
        turns=len(workload.turns),
        sessions=len(workload.sessions),
        prompt_tokens=prompt_tokens,
        prompt_estimated=prompt_est,
        output_tokens=output_tokens,
        output_estimated=output_est,
        prompt_chars=chars,
        repeated_prefix_chars=repeated,
        endpoints=endpoints,
        hash=workload.hash,
    )


def _count_note(estimated: int, turns: int) -> str:
    if not estimated:
        return "(recorded)"
    if estimated == turns:
        return f"(estimated: characters/{CHARS_PER_TOKEN}, no recorded counts)"
    return f"({estimated} of {turns} turns estimated: characters/{CHARS_PER_TOKEN})"


def format_stats(stats: WorkloadStats, name: str) -> list[str]:
    """Lines for the terminal (tests compare them)."""
    eps = ", ".join(f"{ep} {n}" for ep, n in sorted(stats.endpoints.items()))
    return [
        f"workload       {name}",
        f"hash           {stats.hash}",
        f"turns          {stats.turns}  ({eps})",
        f"sessions       {stats.sessions}",
        f"prompt tokens  {stats.prompt_tokens}  {_count_note(stats.prompt_estimated, stats.turns)}",
        f"output tokens  {stats.output_tokens}  {_count_note(stats.output_estimated, stats.turns)}",
        f"repeated prefix {stats.repeated_prefix_share:.1%} of {stats.prompt_chars} prompt characters "
        "repeat the previous turn of the same session",
    ]
