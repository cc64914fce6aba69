"""Process life and HTTP of an adapter: :class:`ProcessEngine` implements the :class:`Engine`
contract (:mod:`.contract`) for any engine we drive as a subprocess with an HTTP API. Adapters
subclass it and fill in ``kind``, :meth:`command`, :meth:`is_ready`, :meth:`step_timing`.
Process life is in :mod:`.process`, the one HTTP client path in :mod:`.http`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, ClassVar

from frankenstein.config import ResolvedRecipe
from frankenstein.engines.contract import Reply
from frankenstein.engines.http import Answer, TransportError, fetch
from frankenstein.engines.prometheus import Sample, flat, parse_samples
from frankenstein.engines.process import EngineProcess, free_port, log_tail, port_in_use, reap_leftovers
from frankenstein.engines.stream import stream_request
from frankenstein.engines.traits import EngineTraits
from frankenstein.errors import ConfigError, EngineError, EngineRequestError, EngineStartError
from frankenstein.measure.timings import StepTiming

# Bound on one wait for bytes from an engine when the caller names none (replay derives one per turn).
DEFAULT_TIMEOUT_S = 600.0
CONTROL_TIMEOUT_S = 60.0  # /metrics, /tokenize, /health, /version ...


class ProcessEngine:
    """Base adapter (an :class:`~frankenstein.engines.contract.Engine`)."""

    kind = "engine"
    traits: ClassVar[EngineTraits] = EngineTraits()  # what frank may know about it (engines/traits.py)
    ready_path = "/health"
    stop_grace_s = 10.0  # SIGTERM → SIGKILL; an adapter sets what its clean shutdown needs (docs/benchmarks.md)
    endpoints: tuple[str, ...] = ("/v1/chat/completions", "/v1/completions")

    def __init__(
        self, recipe: ResolvedRecipe, log_dir: Path, *, port: int | None = None, host: str = "127.0.0.1"
    ) -> None:
        self.recipe = recipe
        self.host = host
        self.port = port
        self.log_dir = Path(log_dir)
        self.process: EngineProcess | None = None
        self.running = False
        self.version = "unknown"
        self.ready_s: float | None = None

    # -- to override -------------------------------------------------------------------------
    def command(self, port: int) -> list[str]:
        return self.user_command(port)

    def user_command(self, port: int) -> list[str]:
        """The recipe's own ``command`` with ``{port}`` and ``{host}`` filled in."""
        if not self.recipe.command:
            raise ConfigError(
                f"a {self.kind} recipe without a model launch needs `command` (use {{port}} for the port)",
                field=f"recipes.{self.recipe.name}.command",
            )
        return [a.replace("{port}", str(port)).replace("{host}", self.host) for a in self.recipe.command]

    def is_ready(self, response: Answer) -> bool:
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

    @property
    def pid(self) -> int | None:
        return None if self.process is None or self.process.proc is None else self.process.proc.pid

    @property
    def log_path(self) -> Path | None:
        return None if self.process is None else self.process.log_path

    def launch(self) -> None:
        """Check the recipe, pick the port and start the process (not yet ready)."""
        reap_leftovers()
        self.check_recipe()
        if self.port is None:
            self.port = free_port(self.host)
        elif port_in_use(self.port, self.host):
            raise EngineStartError(f"port {self.host}:{self.port} is already in use; choose another port")
        stamp = time.strftime("%Y%m%d-%H%M%S")
        log_path = self.log_dir / f"{self.recipe.name.replace('/', '_')}-{stamp}-{self.port}.log"
        self.process = EngineProcess(self.command(self.port), env=self.recipe.env, log_path=log_path, name=self.kind)
        self.process.launch()

    def ready(self) -> float:
        """Wait until the engine answers ready; return the seconds waited."""
        if self.process is None:
            raise EngineError(f"{self.kind} was not launched")
        self.ready_s = self.process.wait_ready(
            self.base_url + self.ready_path, self.recipe.start_timeout_s, self.is_ready
        )
        self.running = True
        self.version = self.read_version()
        return self.ready_s

    def start(self) -> ProcessEngine:
        """Launch and wait until ready; on any failure the process is stopped before the error rises."""
        try:
            self.launch()
            self.ready()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        self.running = False
        if self.process is not None:
            self.process.stop(self.stop_grace_s)

    def __enter__(self) -> ProcessEngine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- requests ------------------------------------------------------------------------------
    def _check_running(self) -> None:
        if not self.running or self.port is None:
            raise EngineError(f"{self.kind} is not running")

    def died(self, exc: Exception | None = None) -> EngineError:
        """The error for a request that got no answer: the process's exit, else the transport's."""
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

    def _fetch(self, method: str, path: str, body: bytes | None, timeout_s: float) -> Answer:
        self._check_running()
        assert self.port is not None
        try:
            return fetch(self.host, self.port, method, path, body, timeout_s=timeout_s)
        except TransportError as exc:
            raise self.died(exc) from exc

    def post(self, path: str, body: dict[str, Any] | bytes, *, turn_id: str | None = None) -> dict[str, Any]:
        """POST JSON (a dict, or exact bytes); return the JSON answer or raise EngineRequestError."""
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        r = self._fetch("POST", path, content, DEFAULT_TIMEOUT_S)
        if r.status_code >= 400:
            raise EngineRequestError(
                f"{self.kind} answered {r.status_code} to {path}: {r.text[:300]}", turn_id=turn_id, status=r.status_code
            )
        try:
            answer = r.json()
        except ValueError as exc:
            raise EngineRequestError(
                f"{self.kind} answered non-JSON to {path}: {r.text[:200]!r}", turn_id=turn_id
            ) from exc
        if not isinstance(answer, dict):
            raise EngineRequestError(
                f"{self.kind} answered {type(answer).__name__}, not an object, to {path}", turn_id=turn_id
            )
        return answer

    def get(self, path: str) -> Answer:
        return self._fetch("GET", path, None, CONTROL_TIMEOUT_S)

    def scrape(self) -> list[Sample]:
        """``/metrics`` (Prometheus text) as samples with their labels; empty when the engine has none."""
        answer = self.get("/metrics")
        return parse_samples(answer.text) if answer.status_code == 200 else []

    def metrics(self) -> dict[str, float]:
        """``/metrics`` as {sample name with labels: value} (:meth:`scrape`, flat)."""
        return flat(self.scrape())

    def tokenize(self, text: str) -> list[int]:
        return list(self.post("/tokenize", {"content": text})["tokens"])

    def request(self, path: str, body: bytes, *, turn_id: str | None = None, timeout_s: float | None = None) -> Reply:
        """Send exact bytes as a (possibly streamed) request; measure client TTFT and end-to-end.
        ``timeout_s`` bounds every wait for bytes; running past it is an :class:`EngineRequestError`
        naming the bound (the engine is up but did not answer)."""
        self._check_running()
        assert self.port is not None
        bound = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
        try:
            return stream_request(
                self.host,
                self.port,
                path,
                body,
                kind=self.kind,
                step_timing=self.step_timing,
                timeout_s=bound,
                turn_id=turn_id,
            )
        except TimeoutError as exc:
            if self.process is not None and self.process.exited() is not None:
                raise self.died(exc) from exc
            raise EngineRequestError(
                f"{self.kind} sent nothing for {bound:.1f} s (request timeout) on {path}", turn_id=turn_id
            ) from exc
        except TransportError as exc:
            raise self.died(exc) from exc
