"""Replay a workload against a running engine, one request at a time, at a fixed concurrency, or at a rate.

Every arm receives byte-identical requests: the recorded body with the same overrides, encoded by
:func:`frankenstein.workload.trace.request_bytes`. History always comes from the recording (each
turn's request already holds it), never from the live engine. The output length is forced to the
recorded length (``max_tokens``/``n_predict`` + ``ignore_eos``) at temperature 0 with a fixed seed
unless the settings say otherwise. Time comes from the server; client TTFT and end-to-end are kept
beside it, and for a stream the gaps between its content-bearing events (``chunk_gaps_ms``, a list
of ms rounded to 1 µs, :mod:`frankenstein.engines.stream`), from which the pooled inter-token latency
percentiles are computed (:mod:`frankenstein.design.percentiles`).

Nothing hangs: each request has a bound derived from its turn, ``prefill_timeout_s +
timeout_per_token_s × recorded output length`` (:func:`request_timeout`), or the design's fixed
``request_timeout_s``. An engine that is up but sends nothing within the bound fails the request with
an :class:`~frankenstein.errors.EngineRequestError` naming the bound (the start fails with that
reason; the runner's failure policy decides what follows).

Load: after the warm-up turns (always sent one at a time), the measured turns go out in recorded order with at
most ``concurrency`` in flight. With ``rate`` (requests/s) each is also due at a time from
:func:`send_offsets`, a pure function of ``seed``, ``rate``, ``arrivals`` and the turn count (``poisson``:
exponential gaps; ``fixed``: 1/rate apart): a request due while ``concurrency`` are in flight waits for a slot
(as AIPerf's ``--concurrency`` with ``--request-rate``), and its row keeps when it was due, when it went out
and when the replay had its answer (``due_ms``, ``sent_ms``, ``done_ms``). The start's wall span (first measured
send to last measured completion, on the replay's clock around each request) gives ``output_tokens_per_s``,
``requests_per_s`` and, with ``goodput`` targets, ``goodput`` (:func:`frankenstein.measure.timings.start_rates`).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from frankenstein.engines import traits_of
from frankenstein.engines.contract import Engine, Reply
from frankenstein.errors import EngineRequestError
from frankenstein.measure.timings import GAPS_KEY, aggregate, outside_ms, start_rates
from frankenstein.workload.trace import Turn, Workload, request_bytes
from frankenstein.validation import FrozenUserFile


DEFAULT_PREFILL_TIMEOUT_S = 120.0
DEFAULT_PER_TOKEN_TIMEOUT_S = 2.0
UNKNOWN_LENGTH_TOKENS = 4096
TIMEOUT_FIELDS = ("prefill_timeout_s", "timeout_per_token_s", "request_timeout_s")
# Fields left out of the canonical text at their defaults (designs registered before them keep their hash).
DEFAULTED_FIELDS = (*TIMEOUT_FIELDS, "fresh_starts", "rate", "arrivals", "goodput")


class GoodputTargets(FrozenUserFile):
    """``replay.goodput``: a measured request counts toward goodput when every target given holds (AIPerf's
    definition): its client TTFT, and its ITL (the mean gap between its streamed content events)."""

    ttft_ms: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    itl_ms: float | None = Field(default=None, gt=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _some_target(self) -> GoodputTargets:
        if self.ttft_ms is None and self.itl_ms is None:
            raise ValueError("give at least one target: ttft_ms, itl_ms (milliseconds)")
        return self


class ReplaySettings(FrozenUserFile):
    """How turns are sent. Part of a design, so part of its hash."""

    concurrency: int = Field(default=1, ge=1)
    force_length: bool = True
    temperature: float = 0.0
    seed: int = 1
    stream: bool = True
    warmup_turns: int = Field(default=1, ge=0)
    max_turns: int | None = Field(default=None, ge=1)
    # Per-request bound (see the module docstring); generous: a healthy engine never comes near it.
    prefill_timeout_s: float = Field(default=DEFAULT_PREFILL_TIMEOUT_S, gt=0, allow_inf_nan=False)
    timeout_per_token_s: float = Field(default=DEFAULT_PER_TOKEN_TIMEOUT_S, gt=0, allow_inf_nan=False)
    request_timeout_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    # false: the design accepts starts that are not fresh engine lives (an `external` arm, a server
    # already running); its rule then compares occasions of one process, and the facts say so.
    fresh_starts: bool = True
    # Load (module docstring): requests/s after the warm-up, their arrival process, and goodput's targets.
    rate: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    arrivals: Literal["poisson", "fixed"] = "poisson"
    goodput: GoodputTargets | None = None

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Fields added later (timeouts, load) at their defaults are left out, so designs registered before they existed
        keep their canonical text (and hash)."""
        out: dict[str, Any] = handler(self)
        for name in DEFAULTED_FIELDS:
            if name in out and out[name] == type(self).model_fields[name].default:
                del out[name]
        return out


def send_offsets(n: int, rate: float | None, arrivals: str = "poisson", seed: int = 1) -> list[float]:
    """Seconds after the first measured send at which each of ``n`` measured turns is due: all at once without a
    rate (the concurrency alone paces them); ``fixed``: ``i / rate``; ``poisson``: the first at 0, then
    exponential gaps of mean ``1 / rate`` drawn from a generator seeded by ``seed`` alone (every arm, every start
    and every rerun gets the same times)."""
    if rate is None:
        return [0.0] * n
    if arrivals == "fixed":
        return [i / rate for i in range(n)]
    rng, t, out = random.Random(seed), 0.0, []
    for _ in range(n):
        out.append(t)
        t += rng.expovariate(rate)
    return out


def fresh_start_problem(settings: ReplaySettings, engines: dict[str, str]) -> tuple[str, str] | None:
    """(arm, why) for an arm whose engine does not start fresh (its adapter's ``fresh_starts`` trait: a server
    already running) in a design that did not say ``replay.fresh_starts = false``, else None. ``engines``:
    {arm: recipe engine}."""
    if not settings.fresh_starts:
        return None
    for arm, engine in engines.items():
        if not traits_of(engine).fresh_starts:
            return arm, (
                f"engine {engine} (a server already running) does not start fresh, and every decision rule "
                "compares fresh engine starts; set `fresh_starts = false` under [replay] in the design file to "
                "accept starts that are not fresh (the design's facts and the note then say so)"
            )
    return None


def request_timeout(turn: Turn, settings: ReplaySettings) -> float:
    """Seconds one request of ``turn`` may take: the fixed bound, else prefill + per token × recorded
    length (an unknown length counts as :data:`UNKNOWN_LENGTH_TOKENS`)."""
    if settings.request_timeout_s is not None:
        return settings.request_timeout_s
    n = recorded_length(turn)
    return settings.prefill_timeout_s + settings.timeout_per_token_s * (UNKNOWN_LENGTH_TOKENS if n is None else n)


def recorded_length(turn: Turn) -> int | None:
    out = turn.output
    if out.completion_tokens is not None:
        return out.completion_tokens
    return len(out.token_ids) if out.token_ids is not None else None


def overrides(turn: Turn, settings: ReplaySettings) -> dict[str, Any]:
    """The fields replay sets on every recorded body; the same for every arm."""
    o: dict[str, Any] = {"temperature": settings.temperature, "seed": settings.seed, "stream": settings.stream}
    n = recorded_length(turn)
    if settings.force_length and n is not None:
        o["n_predict" if turn.endpoint == "/completion" else "max_tokens"] = n
        o["ignore_eos"] = True
    if settings.stream and turn.endpoint != "/completion":
        o["stream_options"] = {"include_usage": True}
    return o


def replay_body(turn: Turn, settings: ReplaySettings) -> bytes:
    return request_bytes(turn, overrides(turn, settings))


@dataclass
class ReplayResult:
    rows: list[dict[str, Any]]
    metrics: dict[str, float | None]
    invalid: list[str] = field(default_factory=list)
    sent: list[bytes] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.invalid


def _row(idx: int, turn: Turn, warmup: bool, reply: Reply | None, error: str | None) -> dict[str, Any]:
    row: dict[str, Any] = {"idx": idx, "turn_id": turn.turn_id, "warmup": int(warmup), "error": error}
    if reply is not None:
        row.update(reply.timing.as_dict())
        row.update({"ttft_ms": reply.ttft_ms, "e2e_ms": reply.e2e_ms})
        row.update(outside_ms(reply.timing, reply.ttft_ms, reply.e2e_ms))
        if reply.chunk_gaps_ms is not None:
            row[GAPS_KEY] = [round(g, 3) for g in reply.chunk_gaps_ms]  # 1 µs
        if turn.output.text:
            row[TEXT_MATCH_KEY] = int(reply.text == turn.output.text)
    return row


TEXT_MATCH_KEY = "text_match"  # 1 when the reply's text is the recorded text, 0 when not; absent when none recorded


def reproduced(rows: list[dict[str, Any]]) -> tuple[int, int]:
    """(turns whose reply reproduced the recorded text, turns with a recorded text to compare)."""
    compared = [r[TEXT_MATCH_KEY] for r in rows if TEXT_MATCH_KEY in r]
    return sum(compared), len(compared)


def check_validity(turns: list[Turn], rows: list[dict[str, Any]], settings: ReplaySettings) -> list[str]:
    """Turns and generated tokens must match the workload, and prompt tokens too unless every compared turn
    differs (:func:`prompt_count_note`: another tokenizer recorded them)."""
    problems = []
    if len(rows) != len(turns):
        problems.append(f"{len(rows)} turns replayed, workload has {len(turns)}")
    prompt = _prompt_mismatches(turns, rows)
    for turn, row in zip(turns, rows):
        if row.get("error"):
            problems.append(str(row["error"]))  # already names the turn
            continue
        want = recorded_length(turn)
        if settings.force_length and want is not None and row.get("generated_tokens") not in (None, want):
            problems.append(f"turn {turn.turn_id}: generated {row['generated_tokens']} tokens, recorded {want}")
    if prompt and not prompt_count_note(turns, rows):
        problems += prompt
    return problems


def _prompt_mismatches(turns: list[Turn], rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for turn, row in zip(turns, rows):
        rp = turn.output.prompt_tokens
        if not row.get("error") and rp is not None and row.get("prompt_tokens") not in (None, rp):
            out.append(f"turn {turn.turn_id}: prompt has {row['prompt_tokens']} tokens, recorded {rp}")
    return out


def _compared_prompts(turns: list[Turn], rows: list[dict[str, Any]]) -> int:
    return sum(
        1
        for turn, row in zip(turns, rows)
        if not row.get("error") and turn.output.prompt_tokens is not None and row.get("prompt_tokens") is not None
    )


def prompt_count_note(turns: list[Turn], rows: list[dict[str, Any]]) -> str | None:
    """When the engine's prompt count differs from the recorded one on every compared turn (two or more), the
    recording's tokenizer is not this engine's: the recorded counts are then metadata, not a check, and this
    says so. A difference on some turns only stays a problem (the prompt sent was not the one recorded)."""
    compared = _compared_prompts(turns, rows)
    differ = len(_prompt_mismatches(turns, rows))
    if compared < 2 or differ < compared:
        return None
    return (
        f"the engine counted a different number of prompt tokens than recorded on all {compared} compared turns: "
        "the workload was recorded with another tokenizer, so its counts are kept as metadata, not checked"
    )


def replay(
    engine: Engine,
    workload: Workload,
    settings: ReplaySettings = ReplaySettings(),
    progress: Callable[[int, int], None] | None = None,
) -> ReplayResult:
    """Send every turn in recorded order; warm-up turns (the first ``warmup_turns``) are sent one at a time and
    not measured, then the measured turns at the settings' concurrency and rate (module docstring)."""
    turns = list(workload.turns[: settings.max_turns] if settings.max_turns else workload.turns)
    for t in turns:
        if t.endpoint not in engine.endpoints:
            raise EngineRequestError(f"endpoint {t.endpoint} is not served by {engine.kind}", turn_id=t.turn_id)
    bodies = [replay_body(t, settings) for t in turns]
    rows: list[dict[str, Any] | None] = [None] * len(turns)
    clock: dict[int, tuple[float, float]] = {}  # measured turn -> (sent, done), monotonic seconds
    done = 0
    lock = threading.Lock()

    def send(i: int) -> None:
        nonlocal done
        t = turns[i]
        sent = time.monotonic()
        try:
            reply: Reply | None = engine.request(
                t.endpoint, bodies[i], turn_id=t.turn_id, timeout_s=request_timeout(t, settings)
            )
            error = None
        except EngineRequestError as exc:
            if exc.status is None or exc.status >= 500:
                raise
            reply, error = None, str(exc)
        rows[i] = _row(i, t, i < settings.warmup_turns, reply, error)
        with lock:
            clock[i] = (sent, time.monotonic())
            done += 1
            if progress:
                progress(done, len(turns))

    warm = min(settings.warmup_turns, len(turns))
    for i in range(warm):
        send(i)
    due = _dispatch(send, list(range(warm, len(turns))), settings)
    if settings.rate is not None:
        _mark_times(rows, clock, due)
    final = [r for r in rows if r is not None]
    measured = [r for r in final if not r["warmup"] and not r.get("error")]
    note = prompt_count_note(turns, final)
    span = _span(clock, warm)
    g = settings.goodput
    targets = (g.ttft_ms, g.itl_ms) if g else None
    return ReplayResult(
        rows=final,
        metrics={**aggregate(measured), **start_rates(measured, span, targets)},
        invalid=check_validity(turns, final, settings),
        sent=bodies,
        notes=[note] if note else [],
    )


def _dispatch(send: Callable[[int], None], indices: list[int], settings: ReplaySettings) -> dict[int, float]:
    """Send ``indices`` with at most ``concurrency`` in flight, each no earlier than its due time
    (:func:`send_offsets`); a request due while every slot is busy waits for one. Returns {turn: due, monotonic s}.
    A request that raises stops the dispatch and re-raises, as a sequential replay would."""
    offsets = send_offsets(len(indices), settings.rate, settings.arrivals, settings.seed)
    t0 = time.monotonic()
    due = {i: t0 + offset for i, offset in zip(indices, offsets)}
    if settings.concurrency == 1:  # in this thread, as always: one request at a time
        for i in indices:
            time.sleep(max(0.0, due[i] - time.monotonic()))
            send(i)
        return due
    _pooled(send, indices, due, settings.concurrency)
    return due


def _pooled(send: Callable[[int], None], indices: list[int], due: dict[int, float], n: int) -> None:
    """Send from a pool of ``n`` threads, at most ``n`` in flight, none before its due time."""
    slots = threading.BoundedSemaphore(n)
    stop = threading.Event()
    futures: list[Future[None]] = []

    def one(i: int) -> None:
        try:
            send(i)
        except BaseException:
            stop.set()
            raise
        finally:
            slots.release()

    with ThreadPoolExecutor(n) as pool:
        for i in indices:
            if stop.wait(max(0.0, due[i] - time.monotonic())):
                break
            slots.acquire()
            if stop.is_set():
                slots.release()
                break
            futures.append(pool.submit(one, i))
    for f in futures:
        f.result()


def _mark_times(
    rows: list[dict[str, Any] | None], clock: dict[int, tuple[float, float]], due: dict[int, float]
) -> None:
    """A rate design's measured rows keep when each request was due, when it went out and when the replay had its
    answer, in ms after the first was due: how long a request waited for a free slot is ``sent_ms - due_ms``, and
    the start's wall span (:func:`_span`) is the last ``done_ms`` less the first ``sent_ms``, to the µs."""
    if not due:
        return
    t0 = min(due.values())
    for i, when in due.items():
        row = rows[i]
        if row is not None and i in clock:
            sent, done = clock[i]
            row.update(due_ms=_ms_after(t0, when), sent_ms=_ms_after(t0, sent), done_ms=_ms_after(t0, done))


def _ms_after(t0: float, t: float) -> float:
    """Monotonic seconds ``t`` as ms after ``t0``, rounded to 1 µs."""
    return round((t - t0) * 1000.0, 3)


def _span(clock: dict[int, tuple[float, float]], warm: int) -> float | None:
    """Seconds from the first measured send to the last measured completion; None when nothing was measured."""
    measured = [c for i, c in clock.items() if i >= warm]
    if not measured:
        return None
    return max(d for _, d in measured) - min(s for s, _ in measured)
