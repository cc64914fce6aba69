"""Benchmark: per-position top-k KL (lower bound) over 1M positions × top-64, the fidelity gate's hot loop.

Goal (issue 5): ≤ 2 s on a 2-core machine. Synthetic but realistic: a 151,936-token vocabulary (Qwen2.5),
the candidate's list is the served list with small logprob noise, a few ranks swapped and the last 4
entries replaced (so the union is larger than either list and the tail bucket is not empty).
Prints wall and CPU seconds (best of --repeat) for the KL alone and for all per-position statistics.

    .venv/bin/python benchmarks/fidelity_kl.py [--positions 1000000] [--k 64] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from frankenstein.fidelity.kl import position_stats, topk_kl

VOCAB = 151_936


def synthetic(positions: int, k: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    base = rng.integers(0, VOCAB - 4 * k, positions, dtype=np.int32)[:, None]
    s_ids = base + np.arange(0, 4 * k, 4, dtype=np.int32)[None, :]
    raw = np.sort(rng.gamma(0.3, 1.0, (positions, k)).astype(np.float32), axis=1)[:, ::-1]
    s_lp = np.log(raw / (raw.sum(axis=1, keepdims=True) * np.float32(1.02)))
    c_ids = s_ids.copy()
    c_ids[:, -4:] += 1  # four tokens only the candidate lists
    c_ids[:, [1, 2]] = c_ids[:, [2, 1]]
    c_lp = s_lp + rng.normal(0, 0.02, (positions, k)).astype(np.float32)
    c_lp[:, [1, 2]] = c_lp[:, [2, 1]]
    token = s_ids[:, 0].copy()
    return s_ids, s_lp.astype(np.float32), c_ids, c_lp.astype(np.float32), token


def best_of(repeat: int, fn, *args) -> tuple[float, float, object]:  # type: ignore[no-untyped-def]
    wall, cpu, out = float("inf"), float("inf"), None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn(*args)
        wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return wall, cpu, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--positions", type=int, default=1_000_000)
    ap.add_argument("--k", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    s_ids, s_lp, c_ids, c_lp, token = synthetic(a.positions, a.k)
    wall, cpu, out = best_of(a.repeat, topk_kl, s_ids, s_lp, c_ids, c_lp)
    kl = out[0]  # type: ignore[index]
    print(f"topk_kl        {a.positions:,} positions × top-{a.k}: wall {wall:.3f} s, cpu {cpu:.3f} s "
          f"(mean KL {kl.mean():.6f} nats)")
    wall, cpu, _ = best_of(a.repeat, position_stats, s_ids, s_lp, c_ids, c_lp, token)
    print(f"position_stats {a.positions:,} positions × top-{a.k}: wall {wall:.3f} s, cpu {cpu:.3f} s "
          f"(KL, masses, top-1 agreement, Δp of the recorded token)")
    print(f"goal: KL ≤ 2 s → {'met' if min(wall, cpu) <= 2.0 else 'NOT met'}")


if __name__ == "__main__":
    main()
