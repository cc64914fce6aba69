"""Read a tokenizer's pipeline (tokenizer.json) and decide where prompts may be cut — or refuse.

A cut at byte offset ``c`` is *safe* when ``encode(text) == encode(text[:c]) + encode(text[c:])``
(without special tokens). Every stage of the HuggingFace pipeline must keep that true: the
added-token split, the normalizer, each pre-tokenizer stage, the model. We accept only stages whose
behaviour at the cut is proven in ``docs/regioncache.md``; anything else refuses the whole tokenizer
and the cache falls back to full encoding. The analysis is pure: a dict in, a :class:`CutPlan` out.

Proven stages:
- normalizer: none, ``NFC``, ``NFD`` (a "\\n" neither composes nor reorders with its neighbours), or a
  ``Sequence`` of these;
- pre-tokenizer: ``Split`` (``Isolated``, not inverted) with one of the regexes below, ``ByteLevel``
  without a prefix space (with ``use_regex`` it applies the GPT-2 regex), or a ``Sequence`` of these
  holding at least one *barrier* — a stage that is proven to put a piece boundary at the cut;
- model: ``BPE`` without dropout; added tokens without ``single_word``/``lstrip``/``rstrip``;
- post-processor: none, ``ByteLevel``, ``TemplateProcessing``, ``RobertaProcessing``,
  ``BertProcessing`` or a ``Sequence`` of these (special tokens are added once around the whole text).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from frankenstein.regioncache.cuts import NEWLINE_INDENT, NEWLINE_ISOLATED, AddedTokenScanner, NewlineRule

FORMAT = "regioncache-1"

# Split regexes, exactly as they appear in tokenizer.json.
LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
DEEPSEEK_V3 = (
    r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"""
    r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
DIGITS_1_3 = r"\p{N}{1,3}"
DIGIT_1 = r"\p{N}"  # one digit per piece: HF Digits(individual_digits=true), llama.cpp's starcoder/smollm first regex
DEEPSEEK_V3_CJK = "[一-龥぀-ゟ゠-ヿ]+"

# A barrier regex puts a piece boundary after a "\n" that is the last line break before the next
# non-whitespace character (docs/regioncache.md, "Why a newline is a barrier"). A transparent regex
# never matches a "\n", has no look-around and never matches the empty string, so it can only split
# a piece that straddles the cut into the same pieces the two halves would give.
BARRIER_REGEXES = {LLAMA3: "llama3", QWEN2: "qwen2", DEEPSEEK_V3: "deepseek-v3"}
TRANSPARENT_REGEXES = {DIGITS_1_3: "digits-1-3", DIGIT_1: "digits-1", DEEPSEEK_V3_CJK: "deepseek-v3-cjk"}

_IDENTITY_NORMALIZERS = {"NFC", "NFD"}
_NORMALIZER_WHY = {
    "Prepend": "prepends a marker to the first piece (Llama-2/Gemma style): a chunk would get one too",
    "Replace": "a pattern replacement is not proven safe at a cut",
    "NFKC": "compatibility forms can turn a non-space into a space (U+00A8 -> ' \\u0308')",
    "NFKD": "compatibility forms can turn a non-space into a space (U+00A8 -> ' \\u0308')",
    "Precompiled": "a SentencePiece charsmap is not proven safe at a cut",
}


class Refused(Exception):
    """The pipeline is not proven safe; the message says which stage and why."""


@dataclass(frozen=True)
class CutPlan:
    """How to cut prompts for one tokenizer. ``rule is None`` means refused: encode whole texts."""

    identity: bytes
    rule: NewlineRule | None
    reason: str
    scanner: AddedTokenScanner = field(default_factory=AddedTokenScanner)
    prefix: tuple[int, ...] = ()
    suffix: tuple[int, ...] = ()

    @property
    def safe(self) -> bool:
        return self.rule is not None


def tokenizer_identity(spec_json: str) -> bytes:
    """Cache keys start with this: a hash of the whole serialised tokenizer and our format."""
    return hashlib.sha256(FORMAT.encode() + b"\0" + spec_json.encode()).digest()


def analyse(spec: dict[str, Any], identity: bytes = b"") -> CutPlan:
    """The cut plan for a parsed tokenizer.json (pure)."""
    try:
        _check_top(spec)
        normalized_identity = _normalizer_is_identity(spec.get("normalizer"))
        _check_normalizer(spec.get("normalizer"), "normalizer")
        rule, proof = _pre_tokenizer_rule(spec.get("pre_tokenizer"), "pre_tokenizer")
        _check_model(spec.get("model") or {})
        scanner = _scanner(spec.get("added_tokens") or [], normalized_identity)
        prefix, suffix = _specials(spec.get("post_processor"), "post_processor")
    except Refused as exc:
        return CutPlan(identity=identity, rule=None, reason=str(exc))
    return CutPlan(identity=identity, rule=rule, reason=proof, scanner=scanner, prefix=prefix, suffix=suffix)


def analyse_json(spec_json: str) -> CutPlan:
    return analyse(json.loads(spec_json), tokenizer_identity(spec_json))


def _check_top(spec: dict[str, Any]) -> None:
    for key in ("truncation", "padding"):
        if spec.get(key) is not None:
            raise Refused(f"{key}: set; a truncated or padded full encode is not a concatenation of chunks")


def _normalizer_is_identity(node: dict[str, Any] | None) -> bool:
    if node is None:
        return True
    return node.get("type") == "Sequence" and all(_normalizer_is_identity(n) for n in node.get("normalizers", []))


def _check_normalizer(node: dict[str, Any] | None, where: str) -> None:
    if node is None:
        return
    kind = node.get("type")
    if kind == "Sequence":
        for i, child in enumerate(node.get("normalizers", [])):
            _check_normalizer(child, f"{where}.normalizers[{i}]")
        return
    if kind in _IDENTITY_NORMALIZERS:
        return
    raise Refused(f"{where}: {kind} {_NORMALIZER_WHY.get(str(kind), 'is not proven safe at a cut')}")


def _pre_tokenizer_rule(node: dict[str, Any] | None, where: str) -> tuple[NewlineRule, str]:
    """The cut rule the pre-tokenizer allows, and which proof applies."""
    if node is None:
        raise Refused(f"{where}: none; without a barrier no cut inside a text is proven")
    stages = _stages(node, where)
    barriers = [(rule, name) for rule, name in stages if rule is not None]
    if not barriers:
        raise Refused(f"{where}: no stage puts a boundary after a newline")
    # Each barrier's proof holds for its own rule and every stricter one: take the strictest.
    rule = NEWLINE_ISOLATED if any(r is NEWLINE_ISOLATED for r, _ in barriers) else NEWLINE_INDENT
    names = "+".join(name for _, name in stages)
    return rule, f"{names}: cut {rule.describe}"


def _stages(node: dict[str, Any], where: str) -> list[tuple[NewlineRule | None, str]]:
    kind = node.get("type")
    if kind == "Sequence":
        out: list[tuple[NewlineRule | None, str]] = []
        for i, child in enumerate(node.get("pretokenizers", [])):
            out += _stages(child, f"{where}.pretokenizers[{i}]")
        return out
    if kind == "Split":
        return [_split_stage(node, where)]
    if kind == "ByteLevel":
        return [_byte_level_stage(node, where)]
    if kind == "Metaspace":
        raise Refused(
            f"{where}: Metaspace prepends '▁' to the first piece (SentencePiece style); "
            "a chunk would get one the full text does not have"
        )
    raise Refused(f"{where}: {kind} is not proven safe at a cut")


def _split_stage(node: dict[str, Any], where: str) -> tuple[NewlineRule | None, str]:
    pattern = node.get("pattern") or {}
    regex = pattern.get("Regex")
    if regex is None:
        raise Refused(f"{where}: Split on a plain string is not proven safe at a cut")
    if node.get("behavior") != "Isolated" or node.get("invert"):
        raise Refused(
            f"{where}: Split behavior {node.get('behavior')!r} invert={node.get('invert')} "
            "is not proven (only Isolated, not inverted)"
        )
    if regex in BARRIER_REGEXES:
        return NEWLINE_INDENT, BARRIER_REGEXES[regex]
    if regex in TRANSPARENT_REGEXES:
        return None, TRANSPARENT_REGEXES[regex]
    raise Refused(f"{where}: Split regex {regex!r} is not in the proven list")


def _byte_level_stage(node: dict[str, Any], where: str) -> tuple[NewlineRule | None, str]:
    if node.get("add_prefix_space"):
        raise Refused(
            f"{where}: ByteLevel with add_prefix_space=true prepends a space to every piece; "
            "a chunk would get one the full text does not have"
        )
    if node.get("use_regex", True):
        return NEWLINE_ISOLATED, "gpt2"
    return None, "bytelevel"


def _check_model(model: dict[str, Any]) -> None:
    if model.get("type") != "BPE":
        raise Refused(f"model: {model.get('type')} is not proven (only BPE)")
    if model.get("dropout"):
        raise Refused("model.dropout: BPE dropout makes encoding random")


def _scanner(added: list[dict[str, Any]], normalizer_identity: bool) -> AddedTokenScanner:
    raw: list[str] = []
    normalized: list[str] = []
    for i, tok in enumerate(added):
        for flag in ("single_word", "lstrip", "rstrip"):
            if tok.get(flag):
                raise Refused(
                    f"added_tokens[{i}] ({tok.get('content')!r}): {flag}=true looks outside the token; not proven"
                )
        if tok.get("normalized", True) and not normalizer_identity:
            raise Refused(
                f"added_tokens[{i}] ({tok.get('content')!r}): normalized=true under a normalizer; "
                "its matches move with normalization"
            )
        (normalized if tok.get("normalized", True) else raw).append(tok["content"])
    return AddedTokenScanner.build(raw, normalized)


def _specials(node: dict[str, Any] | None, where: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Ids a single-sequence post-processor puts before and after the text."""
    if node is None:
        return (), ()
    kind = node.get("type")
    if kind == "ByteLevel":
        return (), ()
    if kind == "Sequence":
        prefix: tuple[int, ...] = ()
        suffix: tuple[int, ...] = ()
        for i, child in enumerate(node.get("processors", [])):
            p, s = _specials(child, f"{where}.processors[{i}]")
            prefix, suffix = p + prefix, suffix + s
        return prefix, suffix
    if kind == "TemplateProcessing":
        return _template_specials(node, where)
    if kind in ("RobertaProcessing", "BertProcessing"):
        return (int(node["cls"][1]),), (int(node["sep"][1]),)
    raise Refused(f"{where}: {kind} is not understood")


def _template_specials(node: dict[str, Any], where: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    items = node.get("single") or []
    seq_at = [i for i, it in enumerate(items) if "Sequence" in it]
    if len(seq_at) != 1 or items[seq_at[0]]["Sequence"].get("id") != "A":
        raise Refused(f"{where}.single: expected exactly one $A")
    specials = node.get("special_tokens") or {}

    def ids(part: list[dict[str, Any]]) -> tuple[int, ...]:
        out: list[int] = []
        for it in part:
            name = it["SpecialToken"]["id"]
            if name not in specials:
                raise Refused(f"{where}.special_tokens: {name!r} missing")
            out += [int(x) for x in specials[name]["ids"]]
        return tuple(out)

    return ids(items[: seq_at[0]]), ids(items[seq_at[0] + 1 :])
