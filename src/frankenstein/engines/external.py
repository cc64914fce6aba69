"""A server that is already running, at a URL frank was given: no launch, no stop.

    frank replay RECIPE WORKLOAD --url http://127.0.0.1:8080     (``external_recipe`` below)
    [recipes.running] engine = "external", args = ["--url", "http://127.0.0.1:8080"]

It speaks the OpenAI-compatible API (``/v1/chat/completions``, ``/v1/completions``, and llama.cpp's
``/completion``); step timings are llama.cpp's response ``timings`` when the server sends them, else
``usage`` only. ``start()`` checks that the server answers (``/health``, else ``/v1/models``) within
the recipe's ``start_timeout_s``; ``stop()`` leaves it running. Its starts are **not fresh**: every
start talks to the same process, with whatever its caches and warm state hold, so a block design's
starts are not independent engine lives. Registration refuses an external arm unless the design
says so (``replay.fresh_starts = false``), and the facts of a design say its starts were not fresh.
Only ``http://`` (the one stdlib client, :mod:`frankenstein.engines.http`).
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

from frankenstein.config import EXTERNAL_UNAPPLIED, ResolvedRecipe
from frankenstein.engines.base import CONTROL_TIMEOUT_S, ProcessEngine
from frankenstein.engines.http import TransportError, fetch
from frankenstein.engines.llamacpp import LlamaCppEngine
from frankenstein.engines.traits import EngineTraits
from frankenstein.errors import ConfigError, EngineError, EngineStartError
from frankenstein.measure.timings import StepTiming
from frankenstein.validation import http_root

KIND = "external"
NOT_FRESH = "a server already running (not started by frank): its starts are not fresh engine lives"


def parse_url(url: str, field: str) -> tuple[str, int]:
    """(host, port) of ``http://HOST:PORT``; anything else is a ConfigError naming ``field``."""
    try:
        return http_root(url)
    except ValueError as exc:
        raise ConfigError(str(exc), field=field) from exc


def recipe_url(recipe: ResolvedRecipe) -> str:
    """The URL of an external recipe: ``args = ["--url", URL]`` (nothing else is allowed in args)."""
    field = f"recipes.{recipe.name}.args"
    if len(recipe.args) != 2 or recipe.args[0] != "--url":
        raise ConfigError('an external recipe needs args = ["--url", "http://HOST:PORT"] and nothing else', field=field)
    return recipe.args[1]


def external_recipe(recipe: ResolvedRecipe, url: str) -> ResolvedRecipe:
    """``recipe`` pointed at a running server (``frank replay --url``): same name, engine ``external``.
    Nothing of its launch is used, so nothing of it is recorded either (:data:`EXTERNAL_UNAPPLIED`: model,
    parts, env, binary, python, command and cache variables are dropped; :func:`unapplied` names them, and the
    start records the model the server says it serves): a start must not claim what frank did not apply."""
    parse_url(url, "--url")
    empty = copy.deepcopy(EXTERNAL_UNAPPLIED)  # fresh lists and dicts, never shared between recipes
    return recipe.model_copy(update={**empty, "engine": KIND, "args": ["--url", url.strip().rstrip("/")]})


def unapplied(recipe: ResolvedRecipe) -> list[str]:
    """What of ``recipe``'s launch a server frank did not start cannot have been given: its model, parts, env keys,
    binary, python and command (the words for a message; empty when there is nothing)."""
    out = [f"model {recipe.model}"] if recipe.model else []
    out += [f"part {p}" for p in recipe.parts]
    out += [f"env {k}" for k in recipe.env]
    out += [f"{k} {getattr(recipe, k)}" for k in ("binary", "python") if getattr(recipe, k)]
    if recipe.command:
        out.append("command")
    return out


def listed_model(models: Any) -> str | None:
    """The first model of an OpenAI ``GET /v1/models`` answer: its ``root`` (vLLM and SGLang: the path or
    name they were started with), else its ``id``; None when the answer lists none."""
    data = models.get("data") if isinstance(models, dict) else None
    if isinstance(data, list) and data and isinstance(data[0], dict):
        got = data[0].get("root") or data[0].get("id")
        return str(got) if got else None
    return None


class ExternalEngine(ProcessEngine):
    kind = KIND
    traits = EngineTraits(settings=(), launched=False, fresh_starts=False, program=lambda recipe: None)
    ready_path = "/health"
    endpoints = ("/v1/chat/completions", "/v1/completions", "/completion")

    def __init__(
        self, recipe: ResolvedRecipe, log_dir: Path, *, port: int | None = None, host: str = "127.0.0.1"
    ) -> None:
        super().__init__(recipe, log_dir, port=port, host=host)
        self.url = ""
        self.served_model: str | None = None

    @property
    def base_url(self) -> str:
        return self.url or super().base_url

    def check_recipe(self) -> None:
        """The URL is checked (and taken) here, so a bad one fails the start naming the recipe field."""
        self.url = recipe_url(self.recipe).rstrip("/")
        self.host, self.port = parse_url(self.url, f"recipes.{self.recipe.name}.args")

    def launch(self) -> None:
        """Nothing to launch: the server is someone else's."""
        self.check_recipe()

    def ready(self) -> float:
        """Wait until the server answers ``/health`` (or, lacking it, ``/v1/models``) with 200."""
        t0 = time.monotonic()
        deadline = t0 + self.recipe.start_timeout_s
        last = "no answer"
        while True:
            for path in (self.ready_path, "/v1/models"):
                try:
                    answer = fetch(self.host, self.port or 80, "GET", path, None, timeout_s=CONTROL_TIMEOUT_S)
                except TransportError as exc:
                    last = f"{type(exc).__name__}: {exc}"
                    break
                if answer.status_code == 200:
                    self.running = True
                    self.ready_s = time.monotonic() - t0
                    self.version = self.read_version()
                    return self.ready_s
                last = f"{path} answered {answer.status_code}"
            if time.monotonic() >= deadline:
                raise EngineStartError(
                    f"the external server at {self.url} did not answer ready within "
                    f"{self.recipe.start_timeout_s:.0f} s ({last})"
                )
            time.sleep(0.2)

    def stop(self) -> None:
        """The server is left running; this engine only stops talking to it."""
        self.running = False

    def died(self, exc: Exception | None = None) -> EngineError:
        why = f" ({type(exc).__name__}: {exc})" if exc else ""
        return EngineError(f"the external server at {self.url} stopped answering{why}")

    def read_version(self) -> str:
        """The server's own build (llama.cpp ``/props`` ``build_info``) and the model it says it serves,
        marked as not started by frank. The model is the server's word (llama.cpp ``/props`` ``model_path``,
        else the first of ``/v1/models``): frank loaded nothing, so the recipe names none."""
        build, self.served_model = "unknown", None
        try:
            props = self.get("/props")
            if props.status_code == 200:
                data = props.json()
                if isinstance(data, dict):
                    build = str(data.get("build_info") or build)
                    self.served_model = str(data["model_path"]) if data.get("model_path") else None
        except (EngineError, ValueError):
            pass
        if self.served_model is None:
            self.served_model = self._listed_model()
        serving = f", serving {self.served_model}" if self.served_model else ", model not reported"
        return f"{build}{serving} ({NOT_FRESH}; {self.url})"

    def _listed_model(self) -> str | None:
        try:
            answer = self.get("/v1/models")
            return listed_model(answer.json()) if answer.status_code == 200 else None
        except (EngineError, ValueError):
            return None

    def capabilities(self) -> dict[str, Any]:
        return {
            "external": self.url,
            "fresh_start": False,
            "served_model": self.served_model,
            "step_timing": "response timings when present, else usage",
        }

    def step_timing(self, body: dict[str, Any]) -> StepTiming:
        if not body.get("timings"):
            return super().step_timing(body)
        return LlamaCppEngine.step_timing(self, body)  # type: ignore[arg-type]  # llama.cpp's parsing, no process
