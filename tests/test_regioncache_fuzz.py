"""Adversarial fuzz: cached encoding == full encoding for every proven pipeline, and the same fuzz
catches deliberately unsafe cut rules (negative controls).

Texts are random sequences of ``reference.ATOMS`` (CRLF, runs of spaces/newlines/tabs, NBSP, U+3000,
U+2028, combining marks — also right after a newline —, CJK, emoji, digits, added tokens whole and
broken). ``target_chunk=1, min_bytes=0`` turns every allowed cut into a chunk boundary, the
harshest setting; a second pass uses the default content-defined chunking on long texts.
Hypothesis runs derandomized (fixed seed), so a failure reproduces.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cache

import numpy as np
import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample
from tokenizers import Tokenizer

from frankenstein.regioncache import NEWLINE_INDENT, NEWLINE_NONSPACE, NewlineRule, RegionCache
from frankenstein.regioncache import reference as ref
from frankenstein.regioncache.cuts import candidate_cuts
from frankenstein.shipped import data_path

FUZZ = settings(
    derandomize=True, database=None, deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow]
)
ADDED = {
    "<|im_start|>",
    "<|im_end|>",
    "<|begin_of_text|>",
    "<tool_call>",
    "</tool_call>",
    "<think>\n",
    "\n</think>\n\n",
    "<|endoftext|>",
}
PLAIN_ATOMS = tuple(a for a in ref.ATOMS if a not in ADDED)
texts = st.lists(st.sampled_from(ref.ATOMS), min_size=1, max_size=40).map("".join)
plain_texts = st.lists(st.sampled_from(PLAIN_ATOMS), min_size=1, max_size=40).map("".join)
# Whitespace-dense texts: every kind of space and line break around a few non-space characters.
WS_ATOMS = (
    "\n",
    "\n",
    "\r\n",
    "\r",
    " ",
    " ",
    "\t",
    "\u00a0",
    "\u3000",
    "\x0b",
    "\x0c",
    "\u2028",
    "\u0085",
    "\x1c",
    "x",
    "\u00e9",
    "\u0301",
    "1",
    "!",
    "<|im_end|>",
    "\n</think>\n\n",
)
ws_texts = st.lists(st.sampled_from(WS_ATOMS), min_size=1, max_size=30).map("".join)


@cache
def tokenizer(family: str) -> Tokenizer:
    if family == "shipped-tiny":
        return Tokenizer.from_file(str(data_path("tiny-tokenizer.json")))
    return ref.build(family, ref.synthetic_corpus(seed=7, docs=2000))


def every_cut(tok: Tokenizer, rule: NewlineRule | None = None) -> RegionCache:
    return RegionCache(tok, target_chunk=1, min_bytes=0, cut_rule=rule)


def mismatch(cache_: RegionCache, text: str, add_special: bool = True) -> bool:
    full = cache_.tokenizer.encode(text, add_special_tokens=add_special).ids
    return cache_.encode(text, add_special) != full or cache_.count(text, add_special) != len(full)


# ------------------------------------------------------------------ unsafe rules (negative controls)
@dataclass(frozen=True)
class CutAnywhere(NewlineRule):
    def positions(self, data: bytes, arr: np.ndarray, start: int = 0) -> np.ndarray:
        starts = np.flatnonzero((arr & 0xC0) != 0x80)  # every character boundary
        return starts[starts > start]


@dataclass(frozen=True)
class CutBeforeNewline(NewlineRule):
    def positions(self, data: bytes, arr: np.ndarray, start: int = 0) -> np.ndarray:
        nl = np.flatnonzero(arr == 0x0A)
        return nl[nl > start]


@dataclass(frozen=True)
class CutAfterAnyNewline(NewlineRule):
    """After every "\\n", also when whitespace follows."""

    def positions(self, data: bytes, arr: np.ndarray, start: int = 0) -> np.ndarray:
        cuts = np.flatnonzero(arr[:-1] == 0x0A) + 1
        return cuts[cuts > start]


UNSAFE = {
    "anywhere": CutAnywhere("anywhere", False),
    "before-newline": CutBeforeNewline("before-nl", False),
    "after-any-newline": CutAfterAnyNewline("after-any-nl", False),
}
SAFE = ("shipped-tiny", *ref.SAFE_FAMILIES)


# ------------------------------------------------------------------ positives
@pytest.mark.parametrize("family", SAFE)
def test_proven_pipelines_are_enabled(family: str) -> None:
    assert every_cut(tokenizer(family)).enabled


@pytest.mark.parametrize("family", SAFE)
@pytest.mark.parametrize(
    ("add_special", "strategy"),
    [(True, texts), (False, texts), (True, ws_texts)],
    ids=["atoms-specials", "atoms-bare", "whitespace-dense"],
)
def test_fuzz_every_allowed_cut_matches_full_encode(
    family: str, add_special: bool, strategy: st.SearchStrategy[str]
) -> None:
    c = every_cut(tokenizer(family))

    @FUZZ
    @given(strategy)
    def check(text: str) -> None:
        full = c.tokenizer.encode(text, add_special_tokens=add_special).ids
        assert c.encode(text, add_special) == full
        assert c.count(text, add_special) == len(full)

    check()


@pytest.mark.parametrize("family", SAFE)
def test_seeded_fuzz_many_texts_and_the_cuts_are_really_used(family: str) -> None:
    """A cheaper, larger seeded run; it also checks the fuzz exercises cuts (not a vacuous pass)."""
    c = every_cut(tokenizer(family))
    rng = random.Random(20240607)
    n_cuts = 0
    for _ in range(1500):
        text = "".join(rng.choice(ref.ATOMS) for _ in range(rng.randint(1, 60)))
        assert not mismatch(c, text), repr(text)
        n_cuts += len(candidate_cuts(text.encode(), c.rule, c.plan.scanner))  # type: ignore[arg-type]
    assert n_cuts > 3000


@pytest.mark.parametrize("family", SAFE)
def test_long_texts_with_content_defined_chunks(family: str) -> None:
    c = RegionCache(tokenizer(family), target_chunk=256, min_bytes=0)
    rng = random.Random(3)
    for _ in range(6):
        text = "".join(rng.choice(ref.ATOMS) for _ in range(3000))
        base = c.tokenizer.encode(text).ids
        assert c.encode(text) == base
        edited = text[:5000] + "Σ\n" + text[5000:]  # cached chunks around an edit
        assert c.encode(edited) == c.tokenizer.encode(edited).ids
    assert c.status().chunks_hit > 0


def test_digit_runs_across_a_cut() -> None:
    """\\p{N}{1,3} groups from the left of each run: a cut never lands inside a run (the char before
    a newline cut is a newline), and the run after a cut starts there in both encodings."""
    c = every_cut(tokenizer("deepseek-v3"))
    text = "x=1234567\n8901234\n56\n7 89\n"
    assert candidate_cuts(text.encode(), c.rule, c.plan.scanner).tolist() == [10, 18, 21]  # type: ignore[arg-type]
    assert not mismatch(c, text)


def test_indented_lines_are_cut_after_the_last_newline_only() -> None:
    c = every_cut(tokenizer("llama3"))
    text = "def f():\n    x = 1\n\n    return x\n  \n\t\ty\n \u00a0z\n   "
    cuts = candidate_cuts(text.encode(), c.rule, c.plan.scanner).tolist()  # type: ignore[arg-type]
    # after "():\n", after the second of "\n\n", after "  \n" (tabs follow), not before " \u00a0z"
    assert cuts == [9, 20, 36]
    assert not mismatch(c, text)


def test_newline_inside_an_added_token_is_not_cut() -> None:
    c = every_cut(tokenizer("llama3"))
    text = "a\n</think>\n\nb"
    cuts = candidate_cuts(text.encode(), c.rule, c.plan.scanner).tolist()  # type: ignore[arg-type]
    assert 2 not in cuts and 3 not in cuts  # after "a\n" is an edge (2), inside "\n</think>\n\n" is not
    assert cuts == [1, 12]  # the token's edges
    assert not mismatch(c, text)


# ------------------------------------------------------------------ negative controls
def caught(c: RegionCache, strategy: st.SearchStrategy[str], add_special: bool = False) -> str | None:
    try:
        return find(strategy, lambda t: mismatch(c, t, add_special), settings=FUZZ)
    except NoSuchExample:
        return None


@pytest.mark.parametrize("family", SAFE)
@pytest.mark.parametrize("unsafe", sorted(UNSAFE))
def test_fuzz_catches_unsafe_cut_rules(family: str, unsafe: str) -> None:
    example = caught(every_cut(tokenizer(family), UNSAFE[unsafe]), plain_texts)
    assert example is not None, f"{unsafe} on {family} was not caught"


@pytest.mark.parametrize("rule", [NEWLINE_NONSPACE, NEWLINE_INDENT])
def test_fuzz_catches_the_llama3_rules_on_gpt2(rule: NewlineRule) -> None:
    """GPT-2's regex needs a lone newline: with ``\\s+(?!\\S)`` a run "\\n\\n" or "\\n  " before a
    letter splits differently when the text ends after the newline."""
    example = caught(every_cut(tokenizer("gpt2"), rule), plain_texts)
    assert example is not None
    assert "\n" in example


@pytest.mark.parametrize("family", SAFE)
def test_the_stricter_nonspace_rule_is_safe_too(family: str) -> None:
    if family == "gpt2":
        return
    assert caught(every_cut(tokenizer(family), NEWLINE_NONSPACE), texts, add_special=True) is None


@pytest.mark.parametrize("family", ["metaspace", "bytelevel-prefix", "llama2-normalizer"])
def test_refused_pipelines_would_really_break(family: str) -> None:
    """The refusal is not mere caution: forcing newline cuts on these pipelines gives wrong ids."""
    assert not every_cut(tokenizer(family)).enabled
    assert caught(every_cut(tokenizer(family), NEWLINE_NONSPACE), plain_texts) is not None


@pytest.mark.parametrize("family", ref.REFUSED_FAMILIES)
def test_refused_pipelines_still_encode_exactly(family: str) -> None:
    c = every_cut(tokenizer(family))
    rng = random.Random(5)
    for _ in range(50):
        text = "".join(rng.choice(ref.ATOMS) for _ in range(30))
        assert not mismatch(c, text)
    assert c.status().chunks_encoded == 0  # full encodes only
