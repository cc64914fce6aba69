"""SGLang adapter: ``python -m sglang.launch_server`` (or a user command), one request at a time.

Launch: the recipe's ``python`` (else ``$FRANK_SGLANG_PYTHON``) runs ``sglang.launch_server`` with
``--model-path``, our ``--host``/``--port`` and ``--enable-metrics`` (``/metrics``, and the timing
stamps in ``meta_info``). ``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0`` is set unless the recipe sets
it, because SGLang's ``/health`` may run a one-token generation when the server is idle.

Readiness: ``GET /ready`` answering 200. A version without that route (404) is asked ``/health``
instead, which answers 503 until the warm-up request has finished (``ServerStatus.Starting``).

Step timing: ``meta_info`` where the answer carries it (native ``/generate``, streamed or not; the
OpenAI routes of newer versions put speculative counters under ``sglext``), else ``usage``, and
``/metrics`` deltas around each request (``sglang:e2e_request_latency_seconds_sum`` minus
``sglang:time_to_first_token_seconds_sum`` for decode time, token counters), as for vLLM:

- ``completion_tokens``, ``prompt_tokens``, ``cached_tokens``;
- ``spec_verify_ct``: verify forward passes of the target (the first token comes from the prefill),
  hence ``target_steps``; accepted draft tokens under any of their names across versions
  (``spec_accept_token_num``, ``spec_num_correct_drafts``, ``spec_accepted_drafts``), drafted ones
  likewise (``spec_draft_token_num``, ``spec_num_proposed_drafts``, ``spec_proposed_drafts``);
- decode time: ``decode_finished_ts − prefill_finished_ts`` (``--enable-metrics``), else
  ``e2e_latency − first_token_latency`` where a version reports the latter; prefill time:
  ``first_token_latency`` or ``prefill_finished_ts − request_received_ts``.

Logprobs and forced decode: native ``/generate`` with ``input_ids``, ``return_logprob``,
``logprob_start_len`` and ``top_logprobs_num``; ``meta_info.input_top_logprobs`` holds, per input
position from ``logprob_start_len`` on, ``[logprob, token_id, text]`` triples (the first entry null).

SGLang does not run on the machines these tests run on: the parsing is tested on recorded real
responses (``tests/data/sglang/``) and the process life on a test double.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from frankenstein.engines.forcing import ForcedResult, ForcedTurn, forced_per_turn
from frankenstein.engines.http import Answer, TransportError, fetch_url
from frankenstein.engines.prometheus import counter
from frankenstein.engines.scraped import ScrapedRequests
from frankenstein.config import ResolvedRecipe
from frankenstein.engines.traits import OPENAI_TOKENIZE, EngineTraits, launched_python, python_program
from frankenstein.engines.vllm import installed_here, package_dir, source_version, speculative_config
from frankenstein.errors import BinaryNotFoundError, ConfigError, EngineError, FidelityError
from frankenstein.measure.timings import StepTiming
from frankenstein.workload.trace import CHAT, Turn

LAUNCH_MODULE = "sglang.launch_server"
PYTHON_ENV = "FRANK_SGLANG_PYTHON"
HOW_TO_INSTALL = (
    f"install SGLang into its own virtual environment and set the recipe's `python` or ${PYTHON_ENV} "
    "to its interpreter (see docs/engines.md)"
)
FORCED_PATH = "SGLang input_top_logprobs (prefill pass), one request per turn"
ACCEPTED_KEYS = ("spec_accept_token_num", "spec_num_correct_drafts", "spec_accepted_drafts", "spec_accepted_tokens")
DRAFTED_KEYS = ("spec_draft_token_num", "spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_tokens")
SPEC_FLAGS = ("--speculative-algorithm", "--speculative-algo")


def find_sglang_python(explicit: str | None = None) -> str:
    for source, candidate in (("recipe python", explicit), (PYTHON_ENV, os.environ.get(PYTHON_ENV))):
        if candidate:
            if Path(candidate).is_file() and os.access(candidate, os.X_OK):
                return str(Path(candidate).absolute())
            raise BinaryNotFoundError(f"SGLang python not found at {candidate} (from {source}); {HOW_TO_INSTALL}")
    raise BinaryNotFoundError(f"no Python interpreter with SGLang is configured; {HOW_TO_INSTALL}")


def installed_version(python: str) -> str:
    """SGLang's version for ``python``, read from its installed ``version.py`` (not imported: importing sglang
    takes seconds); :class:`BinaryNotFoundError` where ``python`` cannot run or has no ``sglang``."""
    return source_version(package_dir(python, "sglang", HOW_TO_INSTALL))


def version_line() -> str:
    """SGLang's version read as text from its installed source (``$FRANK_SGLANG_PYTHON``, else this
    interpreter), or why none was found."""
    try:
        python = find_sglang_python()
        return f"SGLang {installed_version(python)} ({python}, from {PYTHON_ENV})"
    except EngineError as exc:
        return installed_here("sglang", "SGLang") or f"SGLang: not installed ({str(exc).split(';')[0]})"


def launch_python(recipe: ResolvedRecipe) -> str | None:
    """The interpreter a start of ``recipe`` runs in, found as the adapter finds it (pinned with its packages)."""
    return launched_python(recipe, find_sglang_python)


def launch_program(recipe: ResolvedRecipe) -> str | None:
    """The program a start of ``recipe`` executes: its own command's, else its interpreter's real file."""
    return python_program(recipe, launch_python(recipe))


TRAITS = EngineTraits(
    draft_flags=("--speculative-algorithm", "--speculative-draft-model-path"),
    process_names=("sglang",),
    tokenize=OPENAI_TOKENIZE,
    settings=("SGLANG_", "SGL_"),
    version_line=version_line,
    program=launch_program,
    python=launch_python,
)


# ---------------------------------------------------------------- step timing (pure)


def _first(d: dict[str, Any], keys: Sequence[str]) -> Any:
    return next((d[k] for k in keys if d.get(k) is not None), None)


def _int(x: Any) -> int | None:
    return None if x is None else int(x)


def _diff_ms(end: Any, start: Any) -> float | None:
    return None if end is None or start is None else (float(end) - float(start)) * 1000.0


def meta_of(body: dict[str, Any]) -> dict[str, Any]:
    """The numbers an SGLang answer carries: ``meta_info`` (native) over ``sglext`` (OpenAI routes),
    with ``usage`` token counts where ``meta_info`` has none."""
    usage = body.get("usage") or {}
    meta: dict[str, Any] = {
        "prompt_tokens": usage.get("prompt_tokens"),
        "completion_tokens": usage.get("completion_tokens"),
        "cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens"),
    }
    ext = body.get("sglext") or {}
    for part in (ext, *(v for v in ext.values() if isinstance(v, dict)), body.get("meta_info") or {}):
        meta.update({k: v for k, v in part.items() if v is not None})
    return meta


def timing_from_meta(meta: dict[str, Any], speculative: bool) -> StepTiming:
    """One request's timing from its ``meta_info`` (see module docstring for the fields)."""
    gen = _int(meta.get("completion_tokens"))
    verify = _int(meta.get("spec_verify_ct"))
    accepted = _int(_first(meta, ACCEPTED_KEYS))
    if verify is not None:
        steps: int | None = verify
    else:
        steps = None if speculative or gen is None else max(gen - 1, 0)
    decode = _diff_ms(meta.get("decode_finished_ts"), meta.get("prefill_finished_ts"))
    if decode is None:
        decode = _diff_ms(meta.get("e2e_latency"), meta.get("first_token_latency"))
    prefill = None if meta.get("first_token_latency") is None else float(meta["first_token_latency"]) * 1000.0
    if prefill is None:
        prefill = _diff_ms(meta.get("prefill_finished_ts"), meta.get("request_received_ts"))
    return StepTiming(
        prompt_tokens=_int(meta.get("prompt_tokens")),
        cached_tokens=_int(meta.get("cached_tokens")),
        prompt_ms=prefill,
        generated_tokens=gen,
        decode_ms=decode,
        target_steps=steps,
        drafted=_int(_first(meta, DRAFTED_KEYS)),
        accepted=accepted if (speculative or verify is not None) else None,
    )


def timing_from_delta(delta: dict[str, float], speculative: bool) -> StepTiming:
    """One request's timing from ``/metrics`` deltas (only when exactly that request finished)."""
    if counter(delta, "sglang:num_requests") != 1:
        return StepTiming()
    gen = _int(counter(delta, "sglang:generation_tokens"))
    e2e = counter(delta, "sglang:e2e_request_latency_seconds_sum")
    ttft = counter(delta, "sglang:time_to_first_token_seconds_sum")
    return StepTiming(
        prompt_tokens=_int(counter(delta, "sglang:prompt_tokens")),
        cached_tokens=_int(counter(delta, "sglang:cached_tokens")),
        generated_tokens=gen,
        decode_ms=None if e2e is None or ttft is None else (e2e - ttft) * 1000.0,
        target_steps=None if speculative or gen is None else max(gen - 1, 0),
    )


def input_topk(meta: dict[str, Any], n: int, k: int) -> list[tuple[list[int], list[float]]]:
    """The top-k (ids, logprobs) of the last ``n`` input positions of a ``/generate`` answer."""
    entries = list(meta.get("input_top_logprobs") or [])
    if len(entries) < n:
        raise FidelityError(f"SGLang returned {len(entries)} input positions with top logprobs, {n} were forced")
    out = []
    for entry in entries[len(entries) - n :]:
        rows = sorted(((float(lp), int(tid)) for lp, tid, *_ in (entry or []) if lp is not None), key=lambda r: -r[0])[
            :k
        ]
        out.append(([tid for _, tid in rows], [lp for lp, _ in rows]))
    return out


# ---------------------------------------------------------------- the adapter


class SglangEngine(ScrapedRequests):
    kind = "sglang"
    traits = TRAITS
    ready_path = "/ready"
    endpoints = ("/v1/chat/completions", "/v1/completions")
    metrics_prefix = "sglang:"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.python = ""
        self.server_info: dict[str, Any] = {}

    def check_recipe(self) -> None:
        field = f"recipes.{self.recipe.name}"
        if self.recipe.command:
            return
        if not self.recipe.model:
            raise ConfigError("the recipe names no model (a Hugging Face folder or hub name)", field=f"{field}.model")
        for flag in ("--host", "--port", "--model-path", "--model"):
            if any(a == flag or a.startswith(flag + "=") for a in self.recipe.args):
                raise ConfigError(f"{flag} is chosen by Frankenstein; remove it", field=f"{field}.args")
        self.python = find_sglang_python(self.recipe.python)

    def command(self, port: int) -> list[str]:
        if self.recipe.command:
            return self.user_command(port)
        metrics = [] if "--enable-metrics" in self.recipe.args else ["--enable-metrics"]
        return [
            self.python,
            "-m",
            LAUNCH_MODULE,
            "--model-path",
            self.recipe.model,
            "--host",
            self.host,
            "--port",
            str(port),
            *metrics,
            *self.recipe.args,
        ]

    def start(self) -> SglangEngine:
        if "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION" not in self.recipe.env:
            self.recipe = self.recipe.model_copy(
                update={"env": {**self.recipe.env, "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "0"}}
            )
        super().start()
        return self

    def is_ready(self, response: Answer) -> bool:
        if response.status_code == 404:  # a version without /ready: its /health says 503 until warmed up
            health = response.url.rsplit("/ready", 1)[0] + "/health"
            try:
                return fetch_url(health, timeout_s=5.0).status_code == 200
            except TransportError:
                return False
        return response.status_code == 200

    @property
    def speculative(self) -> bool:
        words = self.recipe.command or self.recipe.args
        return any(w.split("=", 1)[0] in SPEC_FLAGS for w in words) or speculative_config(words) is not None

    def read_version(self) -> str:
        for path in ("/get_server_info", "/server_info"):
            try:
                r = self.get(path)
                if r.status_code == 200:
                    self.server_info = r.json()
                    return str(self.server_info.get("version", "unknown"))
            except (EngineError, ValueError):
                continue
        return "unknown"

    def capabilities(self) -> dict[str, Any]:
        info = self.server_info
        return {
            "engine": "sglang",
            "version": self.version,
            "step_timing": "meta_info" + (" + /metrics deltas" if info.get("enable_metrics", True) else ""),
            "speculative": info.get("speculative_algorithm") or (True if self.speculative else None),
            "logprobs": "return_logprob + top_logprobs_num",
            "forced_decode": FORCED_PATH,
            "tokenize": "/tokenize",
        }

    def step_timing(self, body: dict[str, Any]) -> StepTiming:
        return timing_from_meta(meta_of(body), self.speculative)

    def scraped_timing(self, delta: dict[str, float]) -> StepTiming:
        return timing_from_delta(delta, self.speculative)

    def tokenize(self, text: str) -> list[int]:
        return [int(t) for t in self.post("/tokenize", {"prompt": text, "add_special_tokens": False})["tokens"]]

    # -- logprobs and forced decode -------------------------------------------------------------
    def prompt_ids(self, turn: Turn) -> list[int]:
        """Token-id prompts as they are; text prompts through ``/tokenize``. Chat turns are refused:
        this adapter has no route to SGLang's chat template as token ids."""
        req = turn.request
        prompt = req.get("input_ids", req.get("prompt", req.get("text")))
        if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
            return list(prompt)
        if turn.endpoint != CHAT and isinstance(prompt, str):
            return [
                int(t)
                for t in self.post("/tokenize", {"prompt": prompt, "add_special_tokens": True}, turn_id=turn.turn_id)[
                    "tokens"
                ]
            ]
        raise FidelityError(
            f"turn {turn.turn_id}: the SGLang adapter forces only completion turns with a text or "
            "token-id prompt (no chat-template tokenization route)"
        )

    def generate(self, prompt: list[int], n: int, *, turn_id: str | None = None) -> tuple[list[int], str]:
        """Greedy continuation of ``n`` tokens through ``/generate`` (end-of-text ignored)."""
        body = {"input_ids": prompt, "sampling_params": {"max_new_tokens": n, "temperature": 0.0, "ignore_eos": True}}
        answer = self.post("/generate", body, turn_id=turn_id)
        ids = answer.get("output_ids") or (answer.get("meta_info") or {}).get("output_ids") or []
        return [int(t) for t in ids], str(answer.get("text", ""))

    def forced_topk(
        self,
        prompt: list[int],
        continuation: list[int],
        k: int,
        *,
        turn_id: str | None = None,
    ) -> list[tuple[list[int], list[float]]]:
        body = {
            "input_ids": prompt + continuation,
            "sampling_params": {"max_new_tokens": 1, "temperature": 0.0},
            "return_logprob": True,
            "logprob_start_len": max(len(prompt) - 1, 0),
            "top_logprobs_num": k,
        }
        meta = self.post("/generate", body, turn_id=turn_id).get("meta_info") or {}
        return input_topk(meta, len(continuation), k)

    def forced_decode(
        self,
        turns: Sequence[ForcedTurn],
        k: int,
        skipped: list[str] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> ForcedResult:
        """Every position of every turn, one request per turn (see fidelity.forced.forced_per_turn)."""
        return forced_per_turn(self.forced_topk, turns, k, FORCED_PATH, skipped, progress)
