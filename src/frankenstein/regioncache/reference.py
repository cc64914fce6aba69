"""Reference tokenizer pipelines of known model families, trained here from a corpus you give.

There are no hub downloads on our machines, so tests and the benchmark build tokenizers whose
``tokenizer.json`` pipeline (normalizer, pre-tokenizer, added tokens, post-processor) is the one of a
real family, with a small BPE vocabulary trained with ``tokenizers`` itself. The region cache only
reads the pipeline, so these exercise exactly the code paths real Llama-3/Qwen2/DeepSeek-V3/GPT-2
files do; Metaspace, ByteLevel-with-prefix and Llama-2 normalizer pipelines are the refused ones.
"""

from __future__ import annotations

import random

from collections.abc import Iterable

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from frankenstein.regioncache.pipeline import DEEPSEEK_V3, DEEPSEEK_V3_CJK, DIGITS_1_3, LLAMA3, QWEN2

SAFE_FAMILIES = ("llama3", "qwen2", "deepseek-v3", "gpt2")
REFUSED_FAMILIES = ("metaspace", "bytelevel-prefix", "llama2-normalizer", "nfkc")
FAMILIES = SAFE_FAMILIES + REFUSED_FAMILIES

SPECIAL = ["<|begin_of_text|>", "<|im_start|>", "<|im_end|>", "<|im_sep|>"]
# "\n</think>\n\n" has a newline inside it: a newline cut there would split the token.
PLAIN_ADDED = ["<tool_call>", "</tool_call>", "<think>\n", "\n</think>\n\n"]
GPT2_EOT = "<|endoftext|>"


def _split(pattern: str) -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False)


def _byte_level_bpe(pre: pre_tokenizers.PreTokenizer, normalizer: normalizers.Normalizer | None = None) -> Tokenizer:
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.decoder = decoders.ByteLevel()
    return tok


def _pipeline(family: str) -> Tokenizer:
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    if family == "llama3":
        return _byte_level_bpe(pre_tokenizers.Sequence([_split(LLAMA3), bl]))
    if family == "qwen2":
        return _byte_level_bpe(pre_tokenizers.Sequence([_split(QWEN2), bl]), normalizers.NFC())
    if family == "deepseek-v3":
        pre = pre_tokenizers.Sequence([_split(DIGITS_1_3), _split(DEEPSEEK_V3_CJK), _split(DEEPSEEK_V3), bl])
        return _byte_level_bpe(pre, normalizers.Sequence([]))
    if family == "gpt2":
        return _byte_level_bpe(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
    if family == "bytelevel-prefix":
        return _byte_level_bpe(pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True))
    if family == "nfkc":
        return _byte_level_bpe(pre_tokenizers.Sequence([_split(LLAMA3), bl]), normalizers.NFKC())
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=False))
    if family == "metaspace":
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    elif family == "llama2-normalizer":
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    else:
        raise ValueError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")
    return tok


def build(family: str, corpus: Iterable[str], *, vocab_size: int = 2000, bos: bool | None = None) -> Tokenizer:
    """A trained tokenizer of ``family`` with our added tokens. ``bos`` (default: llama3 and
    deepseek-v3) adds a TemplateProcessing post-processor that puts ``<|begin_of_text|>`` first."""
    tok = _pipeline(family)
    byte_level = family not in ("metaspace", "llama2-normalizer")
    alphabet = pre_tokenizers.ByteLevel.alphabet() if byte_level else []
    specials = SPECIAL + ([] if byte_level else ["<unk>"])
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=alphabet,
        show_progress=False,
        special_tokens=[AddedToken(s, special=True, normalized=False) for s in specials],
    )
    tok.train_from_iterator(corpus, trainer)
    tok.add_tokens([AddedToken(t, normalized=False) for t in PLAIN_ADDED])
    if family == "gpt2":  # GPT-2's own file marks its one special token normalized=true
        tok.add_special_tokens([AddedToken(GPT2_EOT, special=True, normalized=True)])
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    if bos if bos is not None else family in ("llama3", "deepseek-v3"):
        bos_id = tok.token_to_id(SPECIAL[0])
        tok.post_processor = processors.TemplateProcessing(
            single=f"{SPECIAL[0]} $A", pair=f"{SPECIAL[0]} $A {SPECIAL[0]} $B", special_tokens=[(SPECIAL[0], bos_id)]
        )
    return tok


# Pieces that stress cuts: CRLF, runs of spaces/newlines/tabs, NBSP, U+3000 and other Unicode
# spaces, combining marks (also right after a newline), CJK, emoji with joiners and modifiers, digits,
# contractions, punctuation, added tokens whole and broken.
ATOMS = (
    "\n",
    "\n",
    "\n\n",
    "\n\n\n",
    "\r\n",
    "\r",
    "\r\n\r\n",
    " ",
    "  ",
    "    ",
    "\t",
    "\t\t",
    " \n",
    "\n ",
    "\n\t",
    "\u00a0",
    "\u00a0\u00a0",
    "\u3000",
    "\u2003",
    "\u2028",
    "\u0085",
    "\x0b",
    "\x0c",
    "\x1c",
    "\u0301",
    "e\u0301",
    "\u0308",
    "\u00e9",
    "\u1100\u1161",
    "\u1161",
    "漢字",
    "日本語の文",
    "カタカナ",
    "中文，标点。",
    "한국어",
    "👍",
    "👍🏽",
    "👨\u200d👩\u200d👧",
    "🇫🇷",
    "\u200b",
    "\ufeff",
    "0",
    "7",
    "42",
    "123",
    "4567",
    "3.14159",
    "1,000,000",
    "a",
    "x",
    "Hello",
    "world",
    "def",
    "return",
    "self",
    "QUOTE",
    "ßtraße",
    "İ",
    "Σίσυφος",
    "'s",
    "'ll",
    "'T",
    "don't",
    "!",
    "?",
    ".",
    ",",
    "...",
    "()",
    "{",
    "}",
    "#",
    "//",
    "->",
    "==",
    '"',
    "'",
    "<",
    ">",
    "|",
    "<|",
    "|>",
    "<|im_",
    "im_start|>",
    "<tool",
    "call>",
    "<|im_start|>",
    "<|im_end|>",
    "<|begin_of_text|>",
    "<tool_call>",
    "</tool_call>",
    "<think>\n",
    "\n</think>\n\n",
    "</think>",
    "<|endoftext|>",
)


def synthetic_corpus(seed: int, docs: int = 400, atoms_per_doc: int = 60) -> list[str]:
    """Seeded documents made of :data:`ATOMS`, so trained vocabularies hold tokens for whitespace
    runs, newline runs and mixed pieces (an unsafe cut then changes ids, not only pieces)."""

    rng = random.Random(seed)
    return ["".join(rng.choice(ATOMS) for _ in range(rng.randint(1, atoms_per_doc))) for _ in range(docs)]
