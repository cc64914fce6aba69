"""The cache itself: content-defined chunks (an edit re-encodes only nearby chunks), the LRU, the
shadow check, special tokens added once, and concurrent use."""

from __future__ import annotations

import json
import random
import threading
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from frankenstein.regioncache import NewlineRule, RegionCache
from frankenstein.regioncache import reference as ref
from frankenstein.regioncache.cuts import chunk_bounds, scan
from frankenstein.regioncache.lru import ENTRY_OVERHEAD, ByteLRU, ids_cost


@cache
def tokenizer(family: str = "llama3") -> Tokenizer:
    return ref.build(family, ref.synthetic_corpus(seed=11, docs=1500))


@cache
def source_text() -> str:
    """About 300 kB of real Python source: the standard library's json and email packages."""
    roots = [Path(json.__file__).parent, Path(__import__("email").__file__).parent]
    return "".join(p.read_text(encoding="utf-8") for root in roots for p in sorted(root.glob("*.py")))


def chunks_of(c: RegionCache, text: str) -> list[bytes]:
    data = text.encode()
    cuts, starts = scan(data, c.rule, c.plan.scanner)  # type: ignore[arg-type]
    b = chunk_bounds(data, cuts, c.target_chunk, forced=starts)
    return [data[x:y] for x, y in zip(b, b[1:])]


def test_chunks_average_the_target_and_cover_the_text() -> None:
    c = RegionCache(tokenizer())
    parts = chunks_of(c, source_text())
    assert b"".join(parts) == source_text().encode()
    mean = len(source_text().encode()) / len(parts)
    assert 1000 < mean < 4000, mean  # target 2048 bytes


def test_an_added_token_always_starts_a_chunk() -> None:
    """A new chat message begins a new chunk, so appending a turn re-encodes nothing before it."""
    c = RegionCache(tokenizer())
    text = source_text()[:20000] + "<|im_start|>user\nhello\n" + source_text()[20000:40000]
    assert any(p.startswith(b"<|im_start|>user\nhello") for p in chunks_of(c, text))


@pytest.mark.parametrize("where", [0.0, 0.37, 0.81])
def test_an_edit_invalidates_only_nearby_chunks(where: float) -> None:
    c = RegionCache(tokenizer())
    text = source_text()
    before = chunks_of(c, text)
    at = int(len(text) * where)
    after = chunks_of(c, text[:at] + "x = 'an edit'\n" + text[at:])
    changed = len(set(after) - set(before))
    assert changed <= 3, changed
    assert len(before) > 100


def test_second_request_reuses_the_prefix_and_encodes_only_the_new_tail() -> None:
    c = RegionCache(tokenizer())
    text = source_text()
    head, tail = text[: len(text) * 9 // 10], text[len(text) * 9 // 10 :]
    assert c.count(head) == len(tokenizer().encode(head).ids)
    s1 = c.status()
    assert c.encode(head + tail) == tokenizer().encode(head + tail).ids
    s2 = c.status()
    new = s2.chunks_encoded - s1.chunks_encoded
    assert s2.chunks_hit - s1.chunks_hit >= s1.chunks_encoded - 2  # all of the head but its last chunk
    assert new <= len(chunks_of(c, tail)) + 2


@pytest.mark.parametrize("seed", range(4))
def test_the_memo_gives_the_chunks_a_fresh_scan_gives(seed: int) -> None:
    """Extending, editing late, editing early, shrinking: chunks reused from the memo of the earlier
    prompt plus the resumed scan equal a scan of the new prompt from scratch."""
    rng = random.Random(seed)
    c = RegionCache(tokenizer(), target_chunk=rng.choice([64, 512, 2048]))
    text = source_text()[: 60000 + rng.randrange(40000)]
    text = text.replace("\n\n", "\n<|im_end|>\n<|im_start|>user\n", 5)
    c.count(text)
    for _ in range(6):
        at = rng.randrange(len(text))
        kind = rng.choice(["extend", "edit", "cut", "same"])
        new = {
            "extend": text + "".join(rng.choice(ref.ATOMS) for _ in range(200)),
            "edit": text[:at] + rng.choice(ref.ATOMS) + text[at:],
            "cut": text[:at],
            "same": text,
        }[kind]
        fresh = chunks_of(c, new)
        via_memo = c._chunking(new.encode())
        assert [new.encode()[a:b] for a, b in zip(via_memo.bounds, via_memo.bounds[1:])] == fresh, kind
        assert c.encode(new) == tokenizer().encode(new).ids, kind
        assert c.count(new) == len(tokenizer().encode(new).ids), kind
        text = new


def test_counting_an_extension_scans_only_the_new_part() -> None:
    c = RegionCache(tokenizer())
    text = source_text()
    c.count(text)
    ch = c._chunking((text + "\nprint('one more line')\n").encode())
    assert sum(1 for n in ch.counts if n >= 0) >= len(ch.counts) - 3  # counts known from the memo


def test_specials_are_added_once_around_the_whole_text() -> None:
    c = RegionCache(tokenizer("llama3"), min_bytes=0, target_chunk=1)
    text = "line one\nline two\n<|im_start|>user\nhi"
    bos = tokenizer("llama3").token_to_id("<|begin_of_text|>")
    ids = c.encode(text, add_special_tokens=True)
    assert ids[0] == bos and ids.count(bos) == 1
    assert c.encode(text, add_special_tokens=False) == ids[1:]
    assert c.count(text) == len(ids) and c.count(text, add_special_tokens=False) == len(ids) - 1


def test_small_texts_are_encoded_whole() -> None:
    c = RegionCache(tokenizer())
    assert c.count("short\ntext\n") == len(tokenizer().encode("short\ntext\n").ids)
    assert c.status().entries == 0 and c.status().chunks_encoded == 0


def test_keys_depend_on_the_tokenizer() -> None:
    a, b = RegionCache(tokenizer("llama3")), RegionCache(tokenizer("qwen2"))
    assert a.plan.identity != b.plan.identity


# ------------------------------------------------------------------ LRU
def test_lru_evicts_least_recently_used_within_budget() -> None:
    ids = np.arange(25, dtype=np.uint32)  # 100 bytes
    cost = 100 + ENTRY_OVERHEAD
    lru = ByteLRU(max_bytes=3 * cost)
    for k in (b"a", b"b", b"c"):
        lru.put(k, ids, ids_cost(ids))
    assert lru.get_many([b"a"])[0] is not None  # refresh a: b is now the oldest
    lru.put(b"d", ids, ids_cost(ids))
    assert [x is not None for x in lru.get_many([b"a", b"b", b"c", b"d"])] == [True, False, True, True]
    assert lru.nbytes == 3 * cost and lru.evictions == 1


def test_lru_refuses_an_entry_larger_than_the_budget() -> None:
    lru = ByteLRU(max_bytes=1000)
    big = np.zeros(1000, dtype=np.uint32)
    lru.put(b"big", big, ids_cost(big))
    assert len(lru) == 0 and lru.nbytes == 0


def test_cache_stays_within_budget_under_many_texts() -> None:
    budget = 64 * 1024
    c = RegionCache(tokenizer(), max_bytes=budget)
    text = source_text()
    for i in range(0, len(text) - 20000, 20000):
        assert c.count(text[i : i + 20000]) == len(tokenizer().encode(text[i : i + 20000]).ids)
        assert c.status().nbytes <= budget
    assert c.status().evictions > 0


# ------------------------------------------------------------------ shadow check
@dataclass(frozen=True)
class CutBeforeNewline(NewlineRule):
    """Deliberately unsafe (a negative control)."""

    def positions(self, data: bytes, arr: np.ndarray, start: int = 0) -> np.ndarray:
        nl = np.flatnonzero(arr == 0x0A)
        return nl[nl > start]


def test_shadow_check_turns_the_cache_off_at_the_first_mismatch() -> None:
    said: list[str] = []
    c = RegionCache(
        tokenizer(),
        min_bytes=0,
        target_chunk=1,
        shadow_rate=1.0,
        cut_rule=CutBeforeNewline("unsafe", False),
        on_disable=said.append,
    )
    assert c.encode("just one line") == tokenizer().encode("just one line").ids  # no cut: no mismatch
    assert c.enabled
    text = "a\n\n\nb"
    assert c.encode(text) == tokenizer().encode(text).ids  # the shadowed request answers the full encode
    assert not c.enabled
    st = c.status()
    assert st.disabled_by_shadow == said[0] and len(said) == 1
    assert said[0].startswith("shadow check: cached ids differ from a full encode at token ")
    assert st.reason == said[0] and st.entries == 0
    assert c.count("x\n\n\ny") == len(tokenizer().encode("x\n\n\ny").ids)  # full encodes from now on
    assert c.status().shadow_checks == 2


def test_shadow_check_passes_a_proven_rule() -> None:
    c = RegionCache(tokenizer(), min_bytes=0, target_chunk=64, shadow_rate=1.0)
    text = source_text()[:50000]
    for i in range(0, 40000, 4000):
        c.count(text[i : i + 10000])
    st = c.status()
    assert st.enabled and st.shadow_checks == 10 and st.disabled_by_shadow is None


def test_shadow_rate_is_validated() -> None:
    with pytest.raises(ValueError, match="shadow_rate must be within"):
        RegionCache(tokenizer(), shadow_rate=1.5)


# ------------------------------------------------------------------ threads
def test_concurrent_counts_are_exact() -> None:
    c = RegionCache(tokenizer(), max_bytes=256 * 1024)
    text = source_text()
    texts = [text[: 30000 + 7919 * i] for i in range(12)]
    want = [len(tokenizer().encode(t).ids) for t in texts]
    got: dict[int, int] = {}

    def work(i: int) -> None:
        for _ in range(3):
            got[i] = c.count(texts[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [got[i] for i in range(len(texts))] == want
