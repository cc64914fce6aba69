"""A TEST-ONLY engine adapter: the OpenAI-compatible stand-in server of tests/data/standin_server.py.

It is what docs/architecture.md's "add an engine adapter" guide asks for and nothing more: this module, one
registration line (``register_adapter("standin", StandinEngine)``, in the test that uses it) and docs
(docs/engines.md, "A test-only adapter"). Nothing in ``src/`` changes for it: registration, the runner, the
noise guard, the pins, the recorded engine settings and ``/metrics`` all read it through its traits.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from frankenstein.config import ResolvedRecipe
from frankenstein.engines import ProcessEngine
from frankenstein.engines.traits import EngineTraits
from frankenstein.measure.timings import StepTiming

SERVER = Path(__file__).resolve().parent / "data" / "standin_server.py"


def server_program(recipe: ResolvedRecipe) -> str:
    """The file a start runs (pinned by sha256 at registration, recorded with each start)."""
    return str(SERVER)


TRAITS = EngineTraits(
    draft_flags=("--draft",),
    process_names=("standin_server",),
    settings=("DECODE_DELAY_MS",),  # an unprefixed variable the server reads as a setting
    program=server_program,
    version_line=lambda: f"standin 1.0 ({SERVER})",
)


class StandinEngine(ProcessEngine):
    kind = "standin"
    traits = TRAITS
    ready_path = "/health"
    stop_grace_s = 2.0
    endpoints = ("/v1/completions", "/v1/chat/completions")

    def command(self, port: int) -> list[str]:
        return [sys.executable, str(SERVER), "--port", str(port), *self.recipe.args]

    def read_version(self) -> str:
        return str(self.get("/version").json()["version"])

    def step_timing(self, body: dict[str, Any]) -> StepTiming:
        usage, own = body.get("usage") or {}, body.get("timings") or {}
        return StepTiming(
            prompt_tokens=usage.get("prompt_tokens"),
            generated_tokens=usage.get("completion_tokens"),
            decode_ms=own.get("decode_ms"),
            target_steps=own.get("steps"),
        )
