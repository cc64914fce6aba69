"""Forced decode results as adapters produce them: the forced sequences of turns, one start's top-k
lists per position (:class:`ForcedResult`), and the per-turn driver for engines that score a whole
continuation in one request. Pure data and numpy; the fidelity room reads these
(:mod:`frankenstein.fidelity.forced`, :mod:`frankenstein.fidelity.compare`)."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy is imported when arrays are built (Collector.arrays), not by every engine import
    import numpy as np

from frankenstein.errors import EngineRequestError

FORMAT_VERSION = 1


@dataclass
class ForcedTurn:
    """One turn's forced sequence: prompt ids, then continuation ids (each position is predicted)."""

    turn_id: str
    prompt: list[int]
    continuation: list[int]
    source: str

    @property
    def sha(self) -> str:
        """Fingerprint of the exact ids forced, so two starts can prove their positions line up."""
        data = json.dumps([self.prompt, self.continuation], separators=(",", ":")).encode()
        return hashlib.sha256(data).hexdigest()[:16]


@dataclass
class ForcedResult:
    """One start's forced decode: per position, the top-k list as the engine returned it.

    ``ids``/``logprobs`` are (P, width), padded with id −1 / logprob −inf beyond ``n``; ``error``
    marks positions whose request failed. ``turn`` indexes ``turn_ids``/``turn_sha``.
    """

    path: str
    k_requested: int
    k_used: int
    turn_ids: list[str]
    turn_sha: list[str]
    turn: np.ndarray
    pos: np.ndarray
    token: np.ndarray
    ids: np.ndarray
    logprobs: np.ndarray
    n: np.ndarray
    error: np.ndarray
    skipped: list[str] = field(default_factory=list)
    sources: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)

    @property
    def positions(self) -> int:
        return int(self.turn.size)

    def meta(self) -> dict[str, Any]:
        return {
            "format": FORMAT_VERSION,
            "path": self.path,
            "k_requested": self.k_requested,
            "k_used": self.k_used,
            "turn_ids": self.turn_ids,
            "turn_sha": self.turn_sha,
            "skipped": self.skipped,
            "sources": self.sources,
            "seconds": self.seconds,
            "errors": self.errors[:20],
        }


class Collector:
    """Accumulates positions into padded arrays (also used by other adapters' ``forced_decode``)."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.rows: list[tuple[int, int, int, list[int], list[float], bool]] = []

    def add(self, turn: int, pos: int, token: int, ids: list[int], lps: list[float], error: bool) -> None:
        self.rows.append((turn, pos, token, ids, lps, error))

    def arrays(self) -> dict[str, np.ndarray]:
        import numpy as np

        p = len(self.rows)
        width = max([self.width, *(len(r[3]) for r in self.rows)]) if self.rows else self.width
        ids = np.full((p, width), -1, np.int32)
        lps = np.full((p, width), -np.inf, np.float32)
        n = np.zeros(p, np.int32)
        for i, (_, _, _, row_ids, row_lps, _) in enumerate(self.rows):
            m = min(len(row_ids), len(row_lps))
            ids[i, :m], lps[i, :m], n[i] = row_ids[:m], row_lps[:m], m
        col = lambda j, dt: np.array([r[j] for r in self.rows], dt)  # noqa: E731
        return {
            "turn": col(0, np.int32),
            "pos": col(1, np.int32),
            "token": col(2, np.int32),
            "ids": ids,
            "logprobs": lps,
            "n": n,
            "error": col(5, bool),
        }


def forced_per_turn(
    forced_topk: Callable[..., list[tuple[list[int], list[float]]]],
    turns: Sequence[ForcedTurn],
    k: int,
    path: str,
    skipped: list[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
    k_used: int | None = None,
) -> ForcedResult:
    """Forced decode for engines that score a whole continuation in one request (vLLM
    ``prompt_logprobs``, SGLang ``input_top_logprobs``): ``forced_topk(prompt, continuation, k,
    turn_id=...)`` returns (ids, logprobs) per position. A 4xx on a turn is counted as error positions."""
    col = Collector(k if k_used is None else k_used)
    errors: list[str] = []
    t0 = time.perf_counter()
    done, total = 0, sum(len(t.continuation) for t in turns)
    for ti, ft in enumerate(turns):
        try:
            rows = forced_topk(ft.prompt, ft.continuation, k, turn_id=ft.turn_id)
        except EngineRequestError as exc:
            if exc.status is None:
                raise
            errors.append(f"{ft.turn_id}: {exc}")
            rows = [([], [])] * len(ft.continuation)
        for j, tok in enumerate(ft.continuation):
            ids, lps = rows[j] if j < len(rows) else ([], [])
            col.add(ti, j, tok, ids, lps, not ids)
        done += len(ft.continuation)
        if progress:
            progress(done, total)
    return ForcedResult(
        path=path,
        k_requested=k,
        k_used=k_used if k_used is not None else k,
        turn_ids=[t.turn_id for t in turns],
        turn_sha=[t.sha for t in turns],
        skipped=list(skipped or []),
        sources=sources_of(turns),
        seconds=time.perf_counter() - t0,
        errors=errors,
        **col.arrays(),
    )


def sources_of(turns: Sequence[ForcedTurn]) -> dict[str, int]:
    """How many turns each continuation source gave."""
    sources: dict[str, int] = {}
    for ft in turns:
        sources[ft.source] = sources.get(ft.source, 0) + 1
    return sources
