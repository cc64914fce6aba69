"""What the pipeline analysis accepts and refuses (exact reasons), and the Unicode facts the proofs
rest on, checked over every code point."""

from __future__ import annotations

import copy
import json
import sys
import unicodedata
from functools import cache
from typing import Any

import numpy as np
import pytest
from tokenizers import AddedToken, Tokenizer

from frankenstein.errors import ConfigError
from frankenstein.regioncache import NEWLINE_INDENT, NEWLINE_ISOLATED, RegionCache, analyse, load_tokenizer
from frankenstein.regioncache import reference as ref
from frankenstein.regioncache.cuts import _WS_LAST, _WS_LEAD, AddedTokenScanner
from frankenstein.shipped import data_path

WHITE_SPACE = [
    0x9,
    0xA,
    0xB,
    0xC,
    0xD,
    0x20,
    0x85,
    0xA0,
    0x1680,
    *range(0x2000, 0x200B),
    0x2028,
    0x2029,
    0x202F,
    0x205F,
    0x3000,
]  # Unicode PropList White_Space: the \s of the regex engine in tokenizers


@cache
def spec(family: str) -> str:
    return ref.build(family, ref.synthetic_corpus(seed=1, docs=300), vocab_size=600).to_str()


def edited(family: str, path: list[Any], value: Any) -> dict[str, Any]:
    d = copy.deepcopy(json.loads(spec(family)))
    node = d
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return d


def reason(d: dict[str, Any]) -> str:
    plan = analyse(d)
    assert not plan.safe
    return plan.reason


def test_proven_families_and_their_rules() -> None:
    assert analyse(json.loads(spec("llama3"))).rule is NEWLINE_INDENT
    assert analyse(json.loads(spec("qwen2"))).rule is NEWLINE_INDENT
    assert analyse(json.loads(spec("deepseek-v3"))).rule is NEWLINE_INDENT
    assert analyse(json.loads(spec("gpt2"))).rule is NEWLINE_ISOLATED
    tiny = json.loads(data_path("tiny-tokenizer.json").read_text())
    assert analyse(tiny).reason == (
        "llama3+bytelevel: cut after '\\n' when only spaces/tabs, then a non-whitespace character, follow"
    )


def test_specials_from_template_processing() -> None:
    plan = analyse(json.loads(spec("llama3")))
    tok = Tokenizer.from_str(spec("llama3"))
    assert plan.prefix == (tok.token_to_id("<|begin_of_text|>"),) and plan.suffix == ()


@pytest.mark.parametrize(
    ("family", "path", "value", "expected"),
    [
        (
            "llama3",
            ["truncation"],
            {"max_length": 8, "stride": 0, "strategy": "LongestFirst", "direction": "Right"},
            "truncation: set; a truncated or padded full encode is not a concatenation of chunks",
        ),
        (
            "llama3",
            ["pre_tokenizer", "pretokenizers", 0, "pattern", "Regex"],
            r"\s+|\S+",
            "pre_tokenizer.pretokenizers[0]: Split regex '\\\\s+|\\\\S+' is not in the proven list",
        ),
        (
            "llama3",
            ["pre_tokenizer", "pretokenizers", 0, "behavior"],
            "MergedWithPrevious",
            "pre_tokenizer.pretokenizers[0]: Split behavior 'MergedWithPrevious' invert=False is not proven "
            "(only Isolated, not inverted)",
        ),
        (
            "llama3",
            ["pre_tokenizer", "pretokenizers", 0, "pattern"],
            {"String": "\n"},
            "pre_tokenizer.pretokenizers[0]: Split on a plain string is not proven safe at a cut",
        ),
        ("llama3", ["model", "dropout"], 0.1, "model.dropout: BPE dropout makes encoding random"),
        ("llama3", ["normalizer"], {"type": "Lowercase"}, "normalizer: Lowercase is not proven safe at a cut"),
        ("llama3", ["post_processor"], {"type": "Mystery"}, "post_processor: Mystery is not understood"),
        (
            "llama3",
            ["pre_tokenizer", "pretokenizers", 0, "pattern", "Regex"],
            r"\p{N}{1,3}",
            "pre_tokenizer: no stage puts a boundary after a newline",
        ),
        ("llama3", ["pre_tokenizer"], None, "pre_tokenizer: none; without a barrier no cut inside a text is proven"),
        (
            "gpt2",
            ["pre_tokenizer", "add_prefix_space"],
            True,
            "pre_tokenizer: ByteLevel with add_prefix_space=true prepends a space to every piece; a chunk would get "
            "one the full text does not have",
        ),
    ],
)
def test_refusals_name_the_stage(family: str, path: list[Any], value: Any, expected: str) -> None:
    assert reason(edited(family, path, value)) == expected


def test_added_token_flags_are_refused() -> None:
    d = json.loads(spec("llama3"))
    i = next(i for i, t in enumerate(d["added_tokens"]) if t["content"] == "<tool_call>")
    d["added_tokens"][i]["lstrip"] = True
    assert reason(d) == f"added_tokens[{i}] ('<tool_call>'): lstrip=true looks outside the token; not proven"


def test_normalized_added_token_under_a_normalizer_is_refused() -> None:
    d = json.loads(spec("qwen2"))
    d["added_tokens"][1]["normalized"] = True
    assert reason(d) == (
        "added_tokens[1] ('<|im_start|>'): normalized=true under a normalizer; its matches move with normalization"
    )


@pytest.mark.parametrize(
    ("family", "expected"),
    [
        (
            "metaspace",
            "pre_tokenizer: Metaspace prepends '▁' to the first piece (SentencePiece style); a chunk would "
            "get one the full text does not have",
        ),
        (
            "llama2-normalizer",
            "normalizer.normalizers[0]: Prepend prepends a marker to the first piece (Llama-2/Gemma "
            "style): a chunk would get one too",
        ),
        ("nfkc", "normalizer: NFKC compatibility forms can turn a non-space into a space (U+00A8 -> ' \\u0308')"),
    ],
)
def test_refused_families(family: str, expected: str) -> None:
    assert reason(json.loads(spec(family))) == expected


def test_encode_special_tokens_mode_is_refused() -> None:
    tok = Tokenizer.from_str(spec("llama3"))
    tok.encode_special_tokens = True
    c = RegionCache(tok)
    assert not c.enabled
    assert c.status().reason == "encode_special_tokens=True: special tokens are not split out"


def test_load_tokenizer_errors_name_the_file(tmp_path: Any) -> None:
    with pytest.raises(ConfigError) as exc:
        load_tokenizer(tmp_path / "missing.json")
    assert str(exc.value) == f"{tmp_path / 'missing.json'}: file not found"
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(ConfigError) as exc:
        load_tokenizer(bad)
    assert str(exc.value).startswith(f"{bad}: not a tokenizer.json: ")


# ------------------------------------------------------------------ the added-token scanner
def test_scanner_matches_tokenizers_leftmost_longest() -> None:
    """Overlapping and nested added tokens: our spans equal the ones tokenizers extracts."""
    tok = Tokenizer.from_str(spec("llama3"))
    extra = ["ab", "abc", "bcd", "cd", "<x>", "<x><y>", "y>"]
    tok.add_tokens([AddedToken(t, normalized=False) for t in extra])
    scanner = AddedTokenScanner.build(["<|im_start|>", "<|im_end|>", *extra], [])
    added_ids = {tok.token_to_id(t) for t in ["<|im_start|>", "<|im_end|>", *extra]}
    for text in ["abcd", "xabcdx", "bcdab", "<x><y>ab<x>y>", "<|im_start|>abc<|im_end|>cd", "aabcabcd"]:
        enc = tok.encode(text, add_special_tokens=False)
        theirs = [off for i, off in zip(enc.ids, enc.offsets) if i in added_ids]
        assert scanner.spans(text.encode()) == [tuple(o) for o in theirs], text


def test_scanner_second_pass_runs_inside_the_gaps() -> None:
    scanner = AddedTokenScanner.build(["<a>"], ["a>b", "xy"])
    # pass 1 takes "<a>" first, so "a>b" cannot match across it; "xy" is found in the gaps.
    assert scanner.spans(b"xy<a>bxy") == [(0, 2), (2, 5), (6, 8)]


# ------------------------------------------------------------------ Unicode facts behind the proofs
def all_chars() -> list[str]:
    return [chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF]


def test_python_whitespace_covers_unicode_white_space() -> None:
    assert all(chr(c).isspace() for c in WHITE_SPACE)


def test_byte_tables_cover_every_whitespace_character() -> None:
    spaces = [c for c in all_chars() if c.isspace()]
    assert all(_WS_LEAD[c.encode()[0]] for c in spaces)
    assert all(_WS_LAST[c.encode()[-1]] for c in spaces)
    assert not _WS_LEAD[ord("x")] and not np.any(_WS_LEAD[0xF0:])


def test_canonical_normalization_never_makes_whitespace_from_non_whitespace() -> None:
    """NFC/NFD of a non-space character holds no space (NFKC does: U+00A8 -> ' \\u0308')."""
    for c in all_chars():
        if c.isspace():
            continue
        for form in ("NFC", "NFD"):
            if not unicodedata.is_normalized(form, c):
                assert not any(ch.isspace() for ch in unicodedata.normalize(form, c)), (hex(ord(c)), form)
    assert unicodedata.normalize("NFKC", "\u00a8") == " \u0308"


def test_canonical_normalization_keeps_whitespace_and_line_breaks_apart() -> None:
    """A whitespace character normalizes to whitespace, and only "\\r"/"\\n" give "\\r"/"\\n": the
    run after a cut keeps its shape in the normalized text."""
    for c in all_chars():
        for form in ("NFC", "NFD"):
            out = unicodedata.normalize(form, c)
            if c.isspace():
                assert all(ch.isspace() for ch in out), hex(ord(c))
            assert ("\r" in out or "\n" in out) == (c in "\r\n"), hex(ord(c))


def test_newline_does_not_compose_or_reorder() -> None:
    """ "\\n" is a starter (ccc 0) with no decomposition and no composition partner, so canonical
    normalization of a + b, with a ending in "\\n", is normalization of a then of b."""
    assert unicodedata.combining("\n") == 0 and unicodedata.decomposition("\n") == ""
    for c in all_chars():
        if unicodedata.combining(c) or not unicodedata.is_normalized("NFC", "\n" + c):
            for form in ("NFC", "NFD"):
                assert unicodedata.normalize(form, "\n" + c) == "\n" + unicodedata.normalize(form, c)
