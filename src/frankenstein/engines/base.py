"""The engine contract: an adapter knows how to launch an engine, know it is ready, read its step
timings, ask for top-k logprobs, tokenize, and stop it. Process life is in :mod:`.process`."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from frankenstein.config import ResolvedRecipe
from frankenstein.engines.process import EngineProcess, free_port, port_in_use, reap_leftovers
from frankenstein.errors import ConfigError, EngineError, EngineRequestError, EngineStartError
from frankenstein.measure.timings import StepTiming


@dataclass
class Reply:
    """One finished request: the response JSON (the last event's, for streams), server and client times."""

    body: dict[str, Any]
    text: str
    token_ids: list[int] | None
    finish_reason: str | None
    timing: StepTiming
    ttft_ms: float | None
    e2e_ms: float
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


class Engine:
    """Base adapter. Subclasses fill in ``kind``, :meth:`command`, :meth:`is_ready`, :meth:`step_timing`."""

    kind = "openai"
    ready_path = "/health"
    endpoints: tuple[str, ...] = ("/v1/chat/completions", "/v1/completions")

    def __init__(self, recipe: ResolvedRecipe, log_dir: Path, *, port: int | None = None, host: str = "127.0.0.1") -> None:
        self.recipe = recipe
        self.host = host
        self.port = port
        self.log_dir = Path(log_dir)
        self.process: EngineProcess | None = None
        self.client: httpx.Client | None = None
        self.version = "unknown"
        self.ready_s: float | None = None

    # -- to override -------------------------------------------------------------------------
    def command(self, port: int) -> list[str]:
        if not self.recipe.command:
            raise ConfigError("an openai-engine recipe needs `command` (use {port} for the port)", field="command")
        return [a.replace("{port}", str(port)).replace("{host}", self.host) for a in self.recipe.command]

    def is_ready(self, response: httpx.Response) -> bool:
        return response.status_code == 200

    def step_timing(self, body: dict[str, Any]) -> StepTiming:
        usage = body.get("usage") or {}
        return StepTiming(prompt_tokens=usage.get("prompt_tokens"), generated_tokens=usage.get("completion_tokens"))

    def read_version(self) -> str:
        return "unknown"

    def check_recipe(self) -> None:
        """Fail early, with the field named, on things we can check before launching."""

    def capabilities(self) -> dict[str, Any]:
        return {}

    # -- life ----------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> Engine:
        reap_leftovers()
        self.check_recipe()
        if self.port is None:
            self.port = free_port(self.host)
        elif port_in_use(self.port, self.host):
            raise EngineStartError(f"port {self.host}:{self.port} is already in use; choose another port")
        stamp = time.strftime("%Y%m%d-%H%M%S")
        log_path = self.log_dir / f"{self.recipe.name.replace('/', '_')}-{stamp}-{self.port}.log"
        self.process = EngineProcess(self.command(self.port), env=self.recipe.env, log_path=log_path, name=self.kind)
        try:
            self.process.launch()
            self.ready_s = self.process.wait_ready(
                self.base_url + self.ready_path, self.recipe.start_timeout_s, self.is_ready
            )
            # No keep-alive: a fresh loopback connection per request costs ~0.1 ms and removes the race
            # where the server closes an idle connection just as the client reuses it.
            self.client = httpx.Client(
                base_url=self.base_url, timeout=httpx.Timeout(600.0, connect=10.0), trust_env=False,
                limits=httpx.Limits(max_keepalive_connections=0),
            )
            self.version = self.read_version()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
        if self.process is not None:
            self.process.stop()

    def __enter__(self) -> Engine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def log_path(self) -> Path | None:
        return None if self.process is None else self.process.log_path

    # -- requests ------------------------------------------------------------------------------
    def _client(self) -> httpx.Client:
        if self.client is None:
            raise EngineError(f"{self.kind} is not running")
        return self.client

    def _died(self, exc: Exception | None = None) -> EngineError:
        from frankenstein.engines.process import log_tail

        code = self.process.exited() if self.process else None
        if code is None and self.process is not None and self.process.proc is not None:
            try:  # a crash may still be in progress
                code = self.process.proc.wait(timeout=0.5)
            except Exception:  # noqa: BLE001 - still running
                code = None
        if code is not None and self.process is not None:
            return EngineStartError(f"{self.kind} died (exit code {code})", log_tail=log_tail(self.process.log_path))
        why = f" ({type(exc).__name__}: {exc})" if exc else ""
        return EngineError(f"{self.kind} at {self.base_url} stopped answering{why}")

    def post(self, path: str, body: dict[str, Any] | bytes, *, turn_id: str | None = None) -> dict[str, Any]:
        """POST JSON (a dict, or exact bytes); return the JSON answer or raise EngineRequestError."""
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        try:
            r = self._client().post(path, content=content, headers={"Content-Type": "application/json"})
        except httpx.TransportError as exc:
            raise self._died(exc) from exc
        if r.status_code >= 400:
            raise EngineRequestError(f"{self.kind} answered {r.status_code} to {path}: {r.text[:300]}", turn_id=turn_id, status=r.status_code)
        return r.json()

    def get(self, path: str) -> httpx.Response:
        try:
            return self._client().get(path)
        except httpx.TransportError as exc:
            raise self._died(exc) from exc

    def metrics(self) -> dict[str, float]:
        """``/metrics`` (Prometheus text) parsed into {sample name with labels: value}."""
        return parse_prometheus(self.get("/metrics").text)

    def tokenize(self, text: str) -> list[int]:
        return list(self.post("/tokenize", {"content": text})["tokens"])

    def request(self, path: str, body: bytes, *, turn_id: str | None = None) -> Reply:
        """Send exact bytes as a streamed request; measure client TTFT and end-to-end; return the :class:`Reply`."""
        from frankenstein.engines.stream import stream_request

        return stream_request(self, path, body, turn_id=turn_id)


def parse_prometheus(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        try:
            out[name] = float(value)
        except ValueError:
            continue
    return out
