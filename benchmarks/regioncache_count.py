"""Region cache benchmark: count a ~200k-token prompt whose first ~190k tokens were seen before.

    .venv/bin/python benchmarks/regioncache_count.py [--reps 7] [--serial]

Trains a Llama-3-style byte-level BPE tokenizer (32k vocabulary) on ~8 MB of the Python standard
library's sources (files in sorted order, shuffled with a fixed seed), builds a chat-shaped prompt
from other stdlib files, warms the cache with its first ~190k tokens (the previous turn), then for
each repetition appends a *different* ~10k-token tail (so every repetition encodes new text) and
times ``RegionCache.count`` against a full ``Tokenizer.encode`` of the same prompt, checking that
``RegionCache.encode`` gives identical ids. ``--serial`` sets TOKENIZERS_PARALLELISM=false (the new
chunks are then encoded on one thread, as the full encode always is).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import sysconfig
import time
from collections.abc import Callable
from pathlib import Path


def stdlib_files(seed: int) -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts and "test" not in p.parts)
    random.Random(seed).shuffle(files)
    return files


def read(p: Path) -> str:
    try:
        return p.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return ""


def take(files: list[Path], chars: int) -> tuple[list[str], list[Path]]:
    """Texts from the front of ``files`` until ``chars`` characters; the rest of the files."""
    out, n, i = [], 0, 0
    while n < chars and i < len(files):
        t = read(files[i])
        i += 1
        if t:
            out.append(t)
            n += len(t)
    return out, files[i:]


def best_and_median(fn: Callable[[], object], reps: int) -> tuple[float, float, float]:
    """(best wall, median wall, median CPU of all threads) in seconds. CPU time is the work done;
    it is less disturbed than wall time when other jobs share the cores."""
    wall, cpu = [], []
    for _ in range(reps):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return min(wall), statistics.median(wall), statistics.median(cpu)


def file_block(path: Path, text: str) -> str:
    return f"<|im_start|>user\nFile {path.name}:\n```python\n{text}```<|im_end|>\n"


def blocks_of(files: list[Path], tokens: int, n: Callable[[str], int], first: str) -> tuple[str, list[Path]]:
    """Chat blocks holding whole files (the last one cut at a line) until ``tokens`` tokens. Blocks
    start and end with added tokens, so their counts add up exactly."""
    out, have, i = [first], n(first), 0
    while have < tokens:
        text = read(files[i])
        i += 1
        block = file_block(files[i - 1], text)
        if have + n(block) > tokens:
            lines = text.splitlines(keepends=True)
            lo, hi = 0, len(lines)
            while lo < hi:  # the most lines that still fit
                mid = (lo + hi + 1) // 2
                fits = have + n(file_block(files[i - 1], "".join(lines[:mid]))) <= tokens
                lo, hi = (mid, hi) if fits else (lo, mid - 1)
            block = file_block(files[i - 1], "".join(lines[:lo]))
        out.append(block)
        have += n(block)
    return "".join(out), files[i:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--serial", action="store_true", help="TOKENIZERS_PARALLELISM=false")
    args = ap.parse_args()
    if args.serial:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    from frankenstein.regioncache import RegionCache
    from frankenstein.regioncache import reference as ref

    files = stdlib_files(seed=20240607)
    corpus, files = take(files, 8_000_000)
    t0 = time.perf_counter()
    tok = ref.build("llama3", corpus, vocab_size=32000)
    print(
        f"trained llama3-style BPE: vocab {tok.get_vocab_size()} on {sum(map(len, corpus)) / 1e6:.1f} MB "
        f"in {time.perf_counter() - t0:.1f} s"
    )

    n = lambda t: len(tok.encode(t, add_special_tokens=False).ids)  # noqa: E731
    head, files = blocks_of(files, 190_000, n, "<|im_start|>system\nYou are a coding agent.<|im_end|>\n")
    tails = []
    for _ in range(args.reps + 1):
        tail, files = blocks_of(files, 10_000, n, "")
        tails.append(tail)
    prompts = [head + t for t in tails]

    cache = RegionCache(tok)
    n_head = cache.count(head)  # the previous turn: warms the cache
    n_total = [len(tok.encode(p).ids) for p in prompts]
    same = all(cache.encode(p) == tok.encode(p).ids for p in prompts[:1])
    print(
        f"prompt: {n_total[0]} tokens ({len(prompts[0].encode()) / 1e6:.2f} MB), cached region {n_head} tokens "
        f"({100 * n_head / n_total[0]:.1f}%), new tail ~{n_total[0] - n_head} tokens; rule {cache.rule.name}"
    )

    # Each timed count sees a tail it has never seen; the full encodes use the same prompts.
    it = iter(prompts[1:])
    t_cached = best_and_median(lambda: cache.count(next(it)), args.reps)
    it_full = iter(prompts[1:])
    t_full = best_and_median(lambda: tok.encode(next(it_full)), args.reps)
    it_fast = iter(prompts[1:])
    t_fast = best_and_median(lambda: tok.encode_batch_fast([next(it_fast)]), args.reps)
    same = same and all(cache.encode(p) == tok.encode(p).ids for p in prompts[1:])
    t_hit = best_and_median(lambda: cache.count(prompts[1]), args.reps)
    cold = RegionCache(tok)
    t0 = time.perf_counter()
    cold.count(prompts[1])
    t_cold = time.perf_counter() - t0

    st = cache.status()
    print(f"{'':34}{'wall best':>11}{'wall median':>13}{'CPU median':>12}")
    for name, (b, m, c) in [
        ("full Tokenizer.encode", t_full),
        ("full encode_batch_fast([text])", t_fast),
        ("RegionCache.count, new 10k tail", t_cached),
        ("RegionCache.count, all cached", t_hit),
    ]:
        print(f"{name:34}{b * 1e3:>9.1f}ms{m * 1e3:>11.1f}ms{c * 1e3:>10.1f}ms")
    print(f"{'RegionCache.count, cold cache':34}{t_cold * 1e3:>9.1f}ms")
    print(
        f"speedup of count over a full Tokenizer.encode: {t_full[1] / t_cached[1]:.1f}x wall (median), "
        f"{t_full[0] / t_cached[0]:.1f}x wall (best), {t_full[2] / t_cached[2]:.1f}x CPU; "
        f"over encode_batch_fast: {t_fast[1] / t_cached[1]:.1f}x wall (median)"
    )
    print(f"identical ids for all {len(prompts)} prompts: {same}")
    print(
        f"cache: {st.entries} entries, {st.nbytes / 1e6:.2f} MB of {st.max_bytes / 1e6:.0f} MB budget; "
        f"threads: {'1 (serial)' if args.serial else 'rayon default'}; cpus {os.cpu_count()}"
    )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
