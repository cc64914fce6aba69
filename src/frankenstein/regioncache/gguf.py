"""A HuggingFace ``tokenizers`` tokenizer rebuilt from a GGUF file's ``tokenizer.ggml.*`` metadata.

A GGUF-only model (no ``tokenizer.json`` beside it) carries its whole tokenizer: the model type
(``tokenizer.ggml.model``), the pre-tokenizer llama.cpp applies (``tokenizer.ggml.pre``), the vocabulary
with token types, the BPE merges and the BOS/EOS flags. For byte-level BPE models whose llama.cpp
pre-tokenizer has a ``tokenizers`` equivalent, the same pipeline is rebuilt here:

    tokenizer.ggml.pre   llama.cpp regexes                        tokenizers pre-tokenizer
    gpt-2                the GPT-2 regex                          ByteLevel(use_regex)
    smollm (starcoder)   "\\p{N}", then the GPT-2 regex            Split("\\p{N}", Isolated) + ByteLevel(use_regex)
    llama-bpe            the Llama-3 regex                        Split(LLAMA3) + ByteLevel(no regex)
    qwen2                the Qwen2 regex                          Split(QWEN2) + ByteLevel(no regex)

Control and user-defined tokens (types 3 and 4) become added tokens (extracted from text, as
llama.cpp's ``/tokenize`` does with ``parse_special``); ``add_bos_token`` adds a BOS post-processor.
Anything else (SentencePiece ``llama`` models, other pre-tokenizers) is :class:`Unsupported` with the
reason: ``frank serve`` then counts through the engine's own ``/tokenize`` with the cache off. The ``gguf``
reader is optional (the ``models`` extra, ``pip install 'frankenstein[models]'``); without it the reason says so.

The rebuilt tokenizer is never trusted on its own: ``frank serve`` compares it with the engine's
``/tokenize`` before serving (and ``--shadow`` keeps comparing), and the region cache still proves
its cut rule from the rebuilt pipeline like any ``tokenizer.json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

from frankenstein.regioncache.pipeline import DIGIT_1 as DIGIT
from frankenstein.regioncache.pipeline import LLAMA3, QWEN2

CONTROL, USER_DEFINED = 3, 4


class Unsupported(Exception):
    """This GGUF's tokenizer cannot be rebuilt exactly here; the message says why."""


def _byte_level(regex: bool) -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=regex)


def _split(pattern: str) -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False)


PRE_TOKENIZERS = {
    "gpt-2": lambda: _byte_level(True),
    "smollm": lambda: pre_tokenizers.Sequence([_split(DIGIT), _byte_level(True)]),
    "starcoder": lambda: pre_tokenizers.Sequence([_split(DIGIT), _byte_level(True)]),
    "llama-bpe": lambda: pre_tokenizers.Sequence([_split(LLAMA3), _byte_level(False)]),
    "qwen2": lambda: pre_tokenizers.Sequence([_split(QWEN2), _byte_level(False)]),
}


def read_fields(path: Path) -> dict[str, Any]:
    """The ``tokenizer.ggml.*`` fields of a GGUF file (the ``gguf`` reader, imported on first use)."""
    try:
        from gguf import GGUFReader  # optional and heavy (numpy memmap reader)
    except ImportError as exc:
        raise Unsupported(
            "the gguf package is not installed; install frankenstein[models] (pip install 'frankenstein[models]') "
            "to rebuild the tokenizer from the GGUF"
        ) from exc
    try:
        fields = GGUFReader(str(path)).fields
    except Exception as exc:  # noqa: BLE001 - the reader raises plain errors on a file that is not GGUF
        raise Unsupported(f"{path}: not a readable GGUF file ({exc})") from exc
    return {k: f.contents() for k, f in fields.items() if k.startswith("tokenizer.ggml.")}


def gguf_tokenizer(path: str | Path) -> Tokenizer:
    """The tokenizer of the GGUF at ``path`` (module docstring), or :class:`Unsupported` saying why."""
    path = Path(path)
    f = read_fields(path)
    model, pre = f.get("tokenizer.ggml.model"), f.get("tokenizer.ggml.pre", "default")
    if model != "gpt2":
        raise Unsupported(f"{path.name}: tokenizer.ggml.model = {model!r}; only byte-level BPE ('gpt2') is rebuilt")
    if pre not in PRE_TOKENIZERS:
        known = ", ".join(sorted(PRE_TOKENIZERS))
        raise Unsupported(f"{path.name}: tokenizer.ggml.pre = {pre!r} has no rebuilt equivalent (known: {known})")
    tokens: list[str] = list(f["tokenizer.ggml.tokens"])
    types: list[int] = list(f.get("tokenizer.ggml.token_type") or [1] * len(tokens))
    merges = [tuple(m.split(" ", 1)) for m in f.get("tokenizer.ggml.merges") or []]
    vocab = {t: i for i, t in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise Unsupported(f"{path.name}: tokenizer.ggml.tokens holds duplicate tokens")
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = PRE_TOKENIZERS[pre]()
    tok.decoder = decoders.ByteLevel()
    added = [
        AddedToken(t, special=True, normalized=False) for t, k in zip(tokens, types) if k in (CONTROL, USER_DEFINED)
    ]
    tok.add_special_tokens(added)
    if f.get("tokenizer.ggml.add_bos_token"):
        bos = int(f["tokenizer.ggml.bos_token_id"])
        tok.post_processor = processors.TemplateProcessing(
            single=f"{tokens[bos]} $A", pair=f"{tokens[bos]} $A {tokens[bos]} $B", special_tokens=[(tokens[bos], bos)]
        )
    return tok
