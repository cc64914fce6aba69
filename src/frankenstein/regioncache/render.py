"""Render an Anthropic ``/v1/messages/count_tokens`` body to the prompt text an engine would tokenize.

1. The Anthropic body becomes OpenAI chat messages the way llama.cpp's server converts it
   (``server_chat_convert_anthropic_to_oai``): ``system`` (a string, or its text blocks joined) is a
   system message; text blocks stay content parts; ``thinking`` becomes ``reasoning_content``;
   ``tool_use`` becomes an assistant ``tool_calls`` entry (arguments: the input as JSON);
   ``tool_result`` becomes a ``tool`` message after it; ``tools`` become function tools.
2. With a chat template (the one the engine reports in llama.cpp's ``GET /props``, else a
   ``tokenizer_config.json`` beside ``tokenizer.json``, else the model's GGUF
   ``tokenizer.chat_template``) and jinja2 installed, the messages are rendered with it,
   ``add_generation_prompt=True``, like a transformers ``apply_chat_template``.
3. Without one, a documented concatenation: for each message ``"<role>: <text>\\n"`` (tool calls as
   their JSON), system first, then ``"assistant: "``. This is an estimate, not the engine's count.

Images cannot be counted from text: :class:`Unrenderable` is raised and the proxy asks the engine.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any


class Unrenderable(Exception):
    """This body cannot be rendered to text here (the proxy passes it to the engine instead)."""


def to_chat(body: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """(OpenAI messages, OpenAI tools or None) for an Anthropic messages body."""
    if not isinstance(body.get("messages"), list):
        raise Unrenderable("'messages' is required and must be a list")
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if isinstance(system, str):
        messages.append({"role": "system", "content": system})
    elif isinstance(system, list):
        messages.append(
            {
                "role": "system",
                "content": "".join(
                    b.get("text", "") for b in system if isinstance(b, dict) and b.get("type") == "text"
                ),
            }
        )
    for msg in body["messages"]:
        messages += _convert(msg)
    tools = body.get("tools")
    oai_tools = None
    if isinstance(tools, list):
        oai_tools = [
            {
                "type": "function",
                "function": {
                    "name": t.get("name", ""),
                    "description": t.get("description", ""),
                    "parameters": t.get("input_schema", {}),
                },
            }
            for t in tools
        ]
    return messages, oai_tools


def _convert(msg: dict[str, Any]) -> list[dict[str, Any]]:
    content = msg.get("content")
    if not isinstance(content, list):
        return [] if content is None and msg.get("role") == "assistant" else [msg]
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    reasoning = ""
    for block in content:
        kind = block.get("type")
        if kind == "text":
            parts.append({"type": "text", "text": block.get("text", "")})
        elif kind == "thinking":
            reasoning += block.get("thinking", "")
        elif kind == "tool_use":
            arguments = json.dumps(block.get("input", {}), separators=(",", ":"), ensure_ascii=False)
            calls.append(
                {
                    "id": block.get("id", ""),
                    "type": "function",
                    "function": {"name": block.get("name", ""), "arguments": arguments},
                }
            )
        elif kind == "tool_result":
            results.append(
                {
                    "role": "tool",
                    "tool_call_id": block.get("tool_use_id", ""),
                    "content": _tool_result_text(block.get("content")),
                }
            )
        else:
            raise Unrenderable(f"content block {kind!r} cannot be counted as text")
    out: list[dict[str, Any]] = []
    if parts or calls or reasoning:
        new: dict[str, Any] = {"role": msg.get("role"), "content": _joined(parts) if parts else ""}
        if calls:
            new["tool_calls"] = calls
        if reasoning:
            new["reasoning_content"] = reasoning
        out.append(new)
    return out + results


def _tool_result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        if any(c.get("type") == "image" for c in content):
            raise Unrenderable("an image inside a tool_result cannot be counted as text")
        return "".join(c.get("text", "") for c in content if c.get("type") == "text")
    return ""


def _joined(parts: list[dict[str, Any]]) -> str:
    """Text parts become one string joined by newlines, as llama.cpp does for templates."""
    return "\n".join(p["text"] for p in parts)


@dataclass(frozen=True)
class ChatTemplate:
    source: str
    bos_token: str = ""
    eos_token: str = ""

    @cached_property
    def _compiled(self) -> Any:
        """The template compiled once (it took milliseconds on every request when compiled per render; a compiled
        jinja template renders from many threads at once)."""
        return _environment().from_string(self.source)

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        return self._compiled.render(
            messages=messages,
            tools=tools,
            add_generation_prompt=True,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
        )


def _environment() -> Any:
    try:  # optional dependency (the serve extra), imported on first use
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as exc:  # pragma: no cover - jinja2 is installed with the project's serve extra
        raise Unrenderable("jinja2 is not installed") from exc

    def raise_exception(message: str) -> None:
        raise Unrenderable(f"chat template: {message}")

    def tojson(
        x: Any, indent: int | None = None, separators: Any = None, sort_keys: bool = False, ensure_ascii: bool = False
    ) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


def concatenate(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    """The documented fallback (module docstring, step 3)."""
    lines = [f"tools: {json.dumps(tools, ensure_ascii=False)}\n"] if tools else []
    for m in messages:
        content = m.get("content")
        text: str = content if isinstance(content, str) else _joined(content or [])
        if m.get("tool_calls"):
            text += json.dumps(m["tool_calls"], ensure_ascii=False)
        lines.append(f"{m.get('role')}: {text}\n")
    return "".join(lines) + "assistant: "


def engine_template(props: dict[str, Any]) -> ChatTemplate | None:
    """The template a llama.cpp engine reports in ``GET /props`` (what it really renders with)."""
    source = props.get("chat_template")
    if not isinstance(source, str) or not source:
        return None
    return ChatTemplate(source, _token_text(props.get("bos_token")), _token_text(props.get("eos_token")))


def find_template(tokenizer_path: Path | None, model_path: Path | None) -> ChatTemplate | None:
    """The model's chat template: tokenizer_config.json beside tokenizer.json, else GGUF metadata."""
    if tokenizer_path is not None:
        cfg = tokenizer_path.parent / "tokenizer_config.json"
        if cfg.is_file():
            data = json.loads(cfg.read_text())
            if isinstance(data.get("chat_template"), str):
                return ChatTemplate(
                    data["chat_template"], _token_text(data.get("bos_token")), _token_text(data.get("eos_token"))
                )
    if model_path is not None and model_path.suffix == ".gguf" and model_path.is_file():
        return _gguf_template(model_path)
    return None


def _token_text(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("content", ""))
    return value if isinstance(value, str) else ""


def _gguf_template(path: Path) -> ChatTemplate | None:
    try:  # optional dependency, heavy (numpy-backed reader), imported on first use
        from gguf import GGUFReader
    except ImportError:
        return None
    fields = GGUFReader(str(path)).fields
    if "tokenizer.chat_template" not in fields:
        return None
    tokens = fields["tokenizer.ggml.tokens"] if "tokenizer.ggml.tokens" in fields else None

    def special(name: str) -> str:
        key = f"tokenizer.ggml.{name}_token_id"
        if tokens is None or key not in fields:
            return ""
        return str(tokens.contents(int(fields[key].contents())))

    return ChatTemplate(str(fields["tokenizer.chat_template"].contents()), special("bos"), special("eos"))


class Renderer:
    """Anthropic body → prompt text, with the model's template when there is one."""

    def __init__(self, template: ChatTemplate | None) -> None:
        self.template = template

    @property
    def how(self) -> str:
        return "chat template (jinja2)" if self.template else "concatenation (see docs/regioncache.md)"

    def render(self, body: dict[str, Any]) -> str:
        messages, tools = to_chat(body)
        if self.template is None:
            return concatenate(messages, tools)
        try:
            return self.template.render(messages, tools)
        except Unrenderable:
            raise
        except Exception as exc:  # a template error is a reason to ask the engine, not to fail
            raise Unrenderable(f"chat template failed: {exc}") from exc
