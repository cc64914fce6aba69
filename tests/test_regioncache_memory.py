"""The LRU's byte budget is a budget of real memory: measured with tracemalloc, what the cache holds
after many distinct prompts stays within the configured budget."""

from __future__ import annotations

import gc
import random
import tracemalloc

from frankenstein.regioncache import RegionCache
from frankenstein.regioncache import reference as ref


def distinct_prompt(rng: random.Random, n_lines: int) -> str:
    words = ["alpha", "beta", "gamma", "delta", "return", "value", "self", "data", "index", "count"]
    return "".join(f"{rng.choice(words)}_{rng.randrange(10**6)} = {rng.randrange(10**9)}\n" for _ in range(n_lines))


def test_lru_holds_its_budget_in_real_memory() -> None:
    tok = ref.build("llama3", ref.synthetic_corpus(seed=3, docs=600), vocab_size=1200)
    budget = 1 << 20  # 1 MiB
    cache = RegionCache(tok, max_bytes=budget, target_chunk=1024)
    rng = random.Random(0)
    prompts = [distinct_prompt(rng, 300) for _ in range(40)]  # ~40 x 10 kB, ids worth ~4x the budget
    cache.count(distinct_prompt(rng, 300))  # warm up: lazy imports are not the cache's memory
    cache.lru.clear()
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for p in prompts:
            cache.count(p)
            assert cache.lru.nbytes <= budget
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    st = cache.status()
    assert st.evictions > 0 and st.nbytes <= budget
    assert st.nbytes > budget * 0.9  # it really filled up
    # The accounting (ids + ENTRY_OVERHEAD per entry) must not undercount real memory.
    assert held <= budget, (held, st.nbytes, st.entries)
