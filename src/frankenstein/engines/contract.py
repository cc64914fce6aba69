"""The engine contract: what every adapter does, and what some can do besides.

``Engine`` is what the runner, replay and the agent loop use: launch the process, wait until it is
ready (``start`` does both), send a request (exact bytes, streamed or not) and get a :class:`Reply`,
read ``/metrics``, tokenize, stop. Capabilities an engine may have are protocols of their own,
checked with ``isinstance`` where they are needed (never by probing attributes):

    ForcedDecoder   fidelity: the prompt as the engine tokenizes it, a greedy continuation, and the
                    top-k logprobs of every position of forced continuations (llama.cpp, vLLM, SGLang)
    TopLogprobs     top-k logprobs of a whole forced continuation in one request (vLLM, SGLang)

Adding an engine: one adapter module (subclass :class:`frankenstein.engines.base.ProcessEngine`,
implement what it can) and one line in :data:`frankenstein.engines.ADAPTERS`. See docs/engines.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from frankenstein.config import ResolvedRecipe
from frankenstein.engines.forcing import ForcedResult, ForcedTurn
from frankenstein.engines.http import Answer
from frankenstein.engines.process import EngineProcess
from frankenstein.engines.prometheus import Sample
from frankenstein.measure.timings import StepTiming
from frankenstein.workload.trace import Turn


@dataclass
class Reply:
    """One finished request: the response JSON (the last event's, for streams), server and client times.

    ``chunk_gaps_ms``: for a stream, the ms between successive content-bearing events after the first
    (n events, n − 1 gaps; events that arrive in one read get near-zero gaps; see
    :mod:`frankenstein.engines.stream`); ``None`` when the request was not streamed. ``headers``: the
    response's headers by lower-case name (an engine's per-request numbers may travel there)."""

    body: dict[str, Any]
    text: str
    token_ids: list[int] | None
    finish_reason: str | None
    timing: StepTiming
    ttft_ms: float | None
    e2e_ms: float
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    chunk_gaps_ms: list[float] | None = None
    headers: dict[str, str] = field(default_factory=dict)


@runtime_checkable
class Engine(Protocol):
    """Every adapter. ``start()`` = ``launch()`` then ``ready()``; ``stop()`` always reaps."""

    kind: str
    recipe: ResolvedRecipe
    version: str
    endpoints: tuple[str, ...]
    ready_s: float | None
    process: EngineProcess | None  # None: nothing launched (yet, or ever: a server already running)

    @property
    def base_url(self) -> str: ...

    @property
    def pid(self) -> int | None: ...

    @property
    def log_path(self) -> Path | None: ...

    def launch(self) -> None: ...

    def ready(self) -> float: ...

    def start(self) -> Engine: ...

    def request(
        self, path: str, body: bytes, *, turn_id: str | None = None, timeout_s: float | None = None
    ) -> Reply: ...

    def post(self, path: str, body: dict[str, Any] | bytes, *, turn_id: str | None = None) -> dict[str, Any]: ...

    def get(self, path: str) -> Answer: ...

    def metrics(self) -> dict[str, float]: ...

    def scrape(self) -> list[Sample]: ...

    def tokenize(self, text: str) -> list[int]: ...

    def capabilities(self) -> dict[str, Any]: ...

    def stop(self) -> None: ...


@runtime_checkable
class ForcedDecoder(Protocol):
    """What fidelity needs from an engine (see :mod:`frankenstein.fidelity.forced`)."""

    def prompt_ids(self, turn: Turn) -> list[int]: ...

    def generate(self, prompt: list[int], n: int, *, turn_id: str | None = None) -> tuple[list[int], str]: ...

    def forced_decode(
        self,
        turns: Sequence[ForcedTurn],
        k: int,
        skipped: list[str] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> ForcedResult: ...


@runtime_checkable
class TopLogprobs(Protocol):
    """Top-k (ids, logprobs) of each position of ``continuation`` given ``prompt`` and what precedes it."""

    def forced_topk(
        self, prompt: list[int], continuation: list[int], k: int, *, turn_id: str | None = None
    ) -> list[tuple[list[int], list[float]]]: ...
