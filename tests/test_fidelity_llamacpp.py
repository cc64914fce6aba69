"""Forced decode on the real llama-server: A vs A′ is exactly 0, the Q8_0 part is not, and the top-k
bound never exceeds the full-vocabulary KL on the same positions (vocab 1536: full lists are asked for)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import BASE_ARGS
from frankenstein.config import ResolvedRecipe
from frankenstein.design.kinds.fidelity import run_forced
from frankenstein.fidelity.compare import compare, summarize_pairs
from frankenstein.engines import start_engine
from frankenstein.fidelity.forced import (
    LLAMACPP_PATH,
    SRC_GENERATED,
    ForcedResult,
    ForcedTurn,
    cut,
    generate_continuations,
)
from frankenstein.fidelity.kl import full_kl, topk_kl
from frankenstein.shipped import data_path
from frankenstein.workload.trace import load_trace
from helpers_campaign import make_workload

pytestmark = pytest.mark.engine
VOCAB = 1536
FULL_POSITIONS = 20


def _recipe(name: str, model: str) -> ResolvedRecipe:
    return ResolvedRecipe(
        name=name, engine="llamacpp", model=str(data_path(model)), args=list(BASE_ARGS), env={}, start_timeout_s=120
    )


class Runs:
    """Every start this module needs, each a separate llama-server life, made once."""

    def __init__(self, root: Path) -> None:
        wl = load_trace(make_workload(root / "w.jsonl", turns=3, tokens=16))
        f16, q8 = _recipe("f16", "tiny-target.gguf"), _recipe("q8", "tiny-target-q8.gguf")
        with start_engine(f16, root / "logs") as engine:  # its own life: A and A′ must share their history
            self.forced = generate_continuations(engine, wl.turns)
        self.a = self._run(f16, wl, root, 64)
        self.a2 = self._run(f16, wl, root, 64)
        self.b = self._run(q8, wl, root, 64)
        # full lists are ~200 kB of JSON per position: the first 20 positions are enough
        self.a_full = self._run(f16, wl, root, 5000, FULL_POSITIONS)
        self.b_full = self._run(q8, wl, root, 5000, FULL_POSITIONS)

    def _run(
        self, recipe: ResolvedRecipe, wl: object, root: Path, k: int, positions: int | None = None
    ) -> ForcedResult:
        forced = cut(self.forced, positions)
        out, res, _ = run_forced(recipe, wl, root / "logs", k, None, forced=forced)  # type: ignore[arg-type]
        assert out.status == "ok" and res is not None, out.reason
        return res


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, llama_server_bin: str) -> Runs:
    return Runs(tmp_path_factory.mktemp("fidelity"))


def _dense(r: ForcedResult) -> np.ndarray:
    """Full-vocabulary log-probabilities per position, by token id (every id must be present)."""
    out = np.full((r.positions, VOCAB), np.nan)
    np.put_along_axis(out, r.ids[:, :VOCAB].astype(np.intp), r.logprobs[:, :VOCAB].astype(np.float64), axis=1)
    assert not np.isnan(out).any()
    return out


def test_forced_sequences_and_path(runs: Runs) -> None:
    assert [t.source for t in runs.forced] == [SRC_GENERATED] * 3
    assert all(len(t.continuation) == 16 for t in runs.forced)
    assert runs.a.path == LLAMACPP_PATH and runs.a.positions == 48
    assert runs.a.k_requested == 64 and runs.a.k_used == 64 and (runs.a.n == 64).all()


def test_k_used_is_capped_at_the_vocabulary_and_recorded(runs: Runs) -> None:
    assert runs.a_full.k_requested == 5000 and runs.a_full.k_used == VOCAB
    assert (runs.a_full.n == VOCAB).all()
    # the top-64 list is the head of the full list (same engine, same positions; tied logits may swap ids)
    np.testing.assert_array_equal(runs.a.logprobs[:FULL_POSITIONS], runs.a_full.logprobs[:, :64])
    same = runs.a.ids[:FULL_POSITIONS] == runs.a_full.ids[:, :64]
    assert same.mean() > 0.99


def test_a_vs_a_prime_is_exactly_zero(runs: Runs) -> None:
    c = compare(runs.a, runs.a2)
    assert c.bad_total == 0 and len(c.keys) == 48
    assert np.all(c.stats.kl == 0.0) and c.stats.top1_agree.all()


def test_q8_part_gives_positive_kl(runs: Runs) -> None:
    s = summarize_pairs([compare(runs.a, runs.b)], threshold=0.5)
    assert s["bad_total"] == 0 and s["positions"] == 48
    assert 1e-4 < s["kl"]["mean"] < 0.05, s["kl"]
    assert s["kl"]["max"] > s["kl"]["median"] > 0
    assert s["top1_agreement"] > 0.9
    assert s["above_threshold"] == 0


def test_topk_bound_never_exceeds_full_vocabulary_kl(runs: Runs) -> None:
    full = full_kl(_dense(runs.a_full), _dense(runs.b_full))
    assert full.mean() > 1e-4
    for k in (1, 4, 16, 64):
        bound, _, _ = topk_kl(
            runs.a_full.ids[:, :k], runs.a_full.logprobs[:, :k], runs.b_full.ids[:, :k], runs.b_full.logprobs[:, :k]
        )
        assert np.all(bound <= full + 1e-6), (k, (bound - full).max())
    # from the server's own top-64 answers
    bound64 = compare(runs.a, runs.b).stats.kl[:FULL_POSITIONS]
    assert np.all(bound64 <= full + 1e-6) and bound64.mean() > 0.9 * full.mean()
    # and with the full lists the "bound" is the full KL
    np.testing.assert_allclose(compare(runs.a_full, runs.b_full).stats.kl, full, rtol=1e-3, atol=1e-6)


def test_forced_turns_fingerprint_what_was_forced() -> None:
    a = ForcedTurn("t", [1, 2], [3], "x")
    assert a.sha == ForcedTurn("t", [1, 2], [3], "y").sha != ForcedTurn("t", [1], [2, 3], "x").sha
