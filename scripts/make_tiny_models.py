#!/usr/bin/env python3
"""Make the tiny llama.cpp models shipped in ``frankenstein/data`` from seeded random weights.

Why: tests and ``frank demo`` need a real engine serving a real model in seconds on a CPU, with
behaviour that exercises what Frankenstein measures: greedy decoding that is deterministic and
peaked, a draft model that the target accepts often (speculative decoding), a quantized copy whose
top-k distributions differ slightly (the fidelity gate), and a chat template with tools.

Outputs (all byte-for-byte reproducible from ``--seed`` with the library versions in MADE_WITH):
  tiny-tokenizer.json    byte-level BPE (HF ``tokenizers``), trained on a corpus built here
  tiny-target.gguf       llama, TARGET_SHAPE, f16 weights
  tiny-draft.gguf        the target's embedding + layer 0 + output head (agrees with the target often)
  tiny-target-q8.gguf    the target with Q8_0 weights (quantized from the same f32 weights)

Usage: python scripts/make_tiny_models.py [--out DIR] [--seed N]

Other sizes (same tokenizer, same recipe of weights; written to --out, never over the shipped files):
  --layers N --hidden D --heads H --kv-heads K --ff F   the target's shape
  --draft-layers L                                      the draft keeps the target's first L layers
  --ctx C --no-q8                                       context length; skip the Q8_0 copy
e.g. a ~1 B target with a one-layer draft for a GPU (docs/gpu.md):
  python scripts/make_tiny_models.py --out models --layers 22 --hidden 2048 --heads 16 --kv-heads 4 --ff 5632 --no-q8
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter, LlamaFileType, TokenType
from gguf.quants import quantize
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

SEED = 20240607
MADE_WITH = {"gguf": "0.19.0", "tokenizers": "0.23.3", "numpy": "2.4.6"}
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "src" / "frankenstein" / "data"

TOKENIZER_FILE = "tiny-tokenizer.json"
TARGET_FILE = "tiny-target.gguf"
DRAFT_FILE = "tiny-draft.gguf"
TARGET_Q8_FILE = "tiny-target-q8.gguf"

CONTROL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2
USER_TOKENS = ["<tool_call>", "</tool_call>"]  # appended after the trained vocabulary
N_VOCAB = 1536
BOS_ID, EOS_ID = 0, 2

# Llama-3 pre-tokenizer regex; llama.cpp uses the same one for tokenizer.ggml.pre = "llama-bpe".
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@dataclass(frozen=True)
class Shape:
    """Hyperparameters of one tiny llama model."""

    n_layer: int
    n_embd: int = 192
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 512
    n_vocab: int = N_VOCAB
    n_ctx: int = 4096

    @property
    def n_embd_kv(self) -> int:
        return self.n_embd // self.n_head * self.n_head_kv


TARGET_SHAPE = Shape(n_layer=4)
DRAFT_SHAPE = Shape(n_layer=1)

# Weight scales, tuned by hand (see docs/models.md): embeddings and layer 0 carry the signal,
# later layers add a small perturbation, so a draft made of layer 0 alone agrees with the target
# most of the time; a large output gain makes distributions peaked.
QK_GAIN = 2.0
LATE_LAYER_GAIN = 0.05
LOGIT_GAIN = 10.0

CHAT_TEMPLATE = """\
{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n' }}
{{- 'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}
{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}
{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments ' }}
{{- 'within <tool_call></tool_call> XML tags:\\n<tool_call>\\n' }}
{{- '{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant' }}
{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}
{%- if message.tool_calls %}
{%- for tool_call in message.tool_calls %}
{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
{{- '\\n<tool_call>\\n{"name": "' + tool_call.name + '", "arguments": ' }}
{%- if tool_call.arguments is string %}{{- tool_call.arguments }}
{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}
{{- '}\\n</tool_call>' }}
{%- endfor %}
{%- endif %}
{{- '<|im_end|>\\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""

# ---------------------------------------------------------------------------------------------
# Corpus: built here from embedded text and seeded templates, so the tokenizer does not depend on
# the files of whichever Python is installed.

ENGLISH = """\
The quick brown fox jumps over the lazy dog. A server answers one request at a time.
Please write a function that reads a file and returns the number of lines in it.
Can you explain why the test fails when the input is empty? I think the error is in the loop.
Thank you for the report. We fixed the bug and added a test so it does not come back.
The model runs on two GPUs; the draft model proposes tokens and the target model checks them.
Speculative decoding is faster only when the draft agrees with the target often enough.
Here is a summary of the changes: the cache is now keyed by token ids, not by text.
What is the capital of France? Paris is the capital and the largest city of France.
Sure! Here is an example in Python. Let me know if you have any other questions.
I could not find the file you mentioned. Could you check the path and try again?
The weather today is sunny with a light wind from the west, and it will rain tomorrow.
Numbers like 3, 14, 2024, and 1000000 appear in logs, dates, prices and measurements.
First, install the package. Then run the command below and wait for the build to finish.
The results show a small improvement, but the difference is within the noise of the test.
We measured the time per step over many blocks and report the geometric mean of the ratios.
Every change must pass a registered test before it is adopted into the served recipe.
She opened the window, looked at the garden, and decided to read a book instead of working.
If the process is killed, the next run resumes from the first unfinished step.
Error: permission denied while opening the configuration file. Check the file mode.
The user asked the assistant to call a tool, and the tool returned a short JSON answer.
"""

CODE = '''\
import os
import sys
from pathlib import Path


def count_lines(path: str) -> int:
    """Return the number of lines in the file at path."""
    with open(path, encoding="utf-8") as f:
        return sum(1 for _ in f)


class Cache:
    def __init__(self, capacity: int = 128) -> None:
        self.capacity = capacity
        self._items: dict[str, bytes] = {}

    def get(self, key: str) -> bytes | None:
        return self._items.get(key)

    def put(self, key: str, value: bytes) -> None:
        if len(self._items) >= self.capacity:
            self._items.pop(next(iter(self._items)))
        self._items[key] = value


def main(argv: list[str]) -> int:
    for name in argv[1:]:
        if not os.path.exists(name):
            print(f"error: {name} not found", file=sys.stderr)
            return 1
        print(name, count_lines(name))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
'''

COMMON_WORDS = (
    "the of and to a in is it you that he was for on are with as I his they be at one have this from or had by "
    "hot word but what some we can out other were all there when up use your how said an each she which do their "
    "time if will way about many then them write would like so these her long make thing see him two has look more "
    "day could go come did number sound no most people my over know water than call first who may down side been "
    "now find any new work part take get place made live where after back little only round man year came show "
    "every good me give our under name very through just form sentence great think say help low line differ turn "
    "cause much mean before move right boy old too same tell does set three want air well also play small end put "
    "home read hand port large spell add even land here must big high such follow act why ask men change went "
    "light kind off need house picture try us again animal point mother world near build self earth father head "
    "stand own page should country found answer school grow study still learn plant cover food sun four between "
    "state keep eye never last let thought city tree cross farm hard start might story saw far sea draw left late "
    "run don't while press close night real life few north open seem together next white children begin got walk "
    "example ease paper group always music those both mark often letter until mile river car feet care second book "
    "carry took science eat room friend began idea fish mountain stop once base hear horse cut sure watch color "
    "face wood main enough plain girl usual young ready above ever red list though feel talk bird soon body dog "
    "family direct leave song measure door product black short class wind question happen complete ship area half "
    "rock order fire south problem piece told knew pass since top whole king space heard best hour better true "
    "during hundred five remember step early hold west ground interest reach fast sing listen six table travel "
    "less morning ten simple several toward war lay against pattern slow center love person money serve appear "
    "road map rain rule pull cold notice voice unit power town fine certain fly fall lead cry dark machine note "
    "wait plan figure star box field rest correct able done drive stood contain front teach week final gave green "
    "quick develop ocean warm free minute strong special mind behind clear produce fact street nothing course stay "
    "full force blue object decide surface deep moon island foot system busy test record boat common gold possible "
    "dry wonder laugh thousand ago ran check game shape miss brought heat snow bring yes distant fill east language "
    "please thank sorry explain error file function code server model request token cache result value"
).split()
PY_WORDS = (
    "False None True and as assert async await break class continue def del elif else except finally for from "
    "global if import in is lambda not or pass raise return try while with yield print len range open str int "
    "list dict set tuple isinstance enumerate zip sorted min max sum self super __init__ append extend items keys "
    "values format join split strip path name data result value key item index count size line text args kwargs"
).split()
WORDS = (
    "model server request token cache file line test value result error table block step draft target engine "
    "recipe design report data string list dict key name path index count size rate speed memory batch queue "
    "worker thread process signal port config"
).split()
VERBS = (
    "read write open close start stop run check load save parse build send receive compute update "
    "find make take give use keep call return measure compare record replay adopt revert"
).split()
PY_TYPES = ["int", "str", "float", "bool", "bytes", "list[int]", "dict[str, int]", "Path", "None"]


def _ident(rng: np.random.Generator, n_parts: int) -> str:
    return "_".join(str(rng.choice(WORDS + VERBS)) for _ in range(n_parts))


def _sentence(rng: np.random.Generator) -> str:
    words = [str(w) for w in rng.choice(COMMON_WORDS, size=int(rng.integers(4, 14)))]
    if rng.random() < 0.3:
        words.insert(int(rng.integers(0, len(words))), str(int(rng.integers(0, 10 ** int(rng.integers(1, 7))))))
    if rng.random() < 0.3:
        words.insert(int(rng.integers(1, len(words))), ",")
    text = " ".join(words).replace(" ,", ",")
    return text[0].upper() + text[1:] + str(rng.choice([".", ".", ".", "?", "!", ":"]))


def _prose(rng: np.random.Generator) -> str:
    return " ".join(_sentence(rng) for _ in range(int(rng.integers(1, 6)))) + "\n"


def _function(rng: np.random.Generator) -> str:
    name = _ident(rng, int(rng.integers(1, 4)))
    indent = "    " if rng.random() < 0.5 else ""
    args = [_ident(rng, 1) for _ in range(int(rng.integers(0, 4)))]
    sig = ", ".join(f"{a}: {rng.choice(PY_TYPES)}" for a in args)
    body = [f'    """{_sentence(rng)}"""']
    for a in args:
        body.append(f'    if {a} is None:\n        raise ValueError("{a} must be set")')
    var = _ident(rng, 2)
    body.append(f"    {var} = [{', '.join(args) or '0'}]")
    body.append(f"    for i, item in enumerate({var}):\n        print(i, item)")
    body.append(f"    # {' '.join(str(w) for w in rng.choice(PY_WORDS, size=6))}")
    body.append(f"    return len({var}) * {int(rng.integers(1, 100))}")
    text = f"def {name}({sig}) -> int:\n" + "\n".join(body) + "\n"
    if rng.random() < 0.5:
        text = f"import {_ident(rng, 1)}\nfrom {_ident(rng, 1)} import {_ident(rng, 2)}\n\n\n" + text
    return "\n".join(indent + line for line in text.splitlines()) + "\n"


def _tool_call(rng: np.random.Generator) -> str:
    args = {_ident(rng, 1): str(rng.choice(WORDS)) for _ in range(int(rng.integers(1, 3)))}
    call = json.dumps({"name": _ident(rng, 2), "arguments": args})
    return f"<tool_call>\n{call}\n</tool_call>"


def _chat(rng: np.random.Generator) -> str:
    turns = [f"<|im_start|>user\n{_sentence(rng)} {_sentence(rng)}<|im_end|>"]
    reply = _tool_call(rng) if rng.random() < 0.3 else " ".join(_sentence(rng) for _ in range(3))
    turns.append(f"<|im_start|>assistant\n{reply}<|im_end|>")
    return "\n".join(turns) + "\n"


def build_corpus(seed: int, n_docs: int = 4000) -> list[str]:
    """Documents for tokenizer training: fixed English and code plus seeded variations of each."""
    rng = np.random.default_rng(seed)
    makers = (_prose, _prose, _function, _chat)
    docs = [ENGLISH] * 20 + [CODE] * 20
    for i in range(n_docs):
        docs.append(makers[i % len(makers)](rng))
    return docs


# ---------------------------------------------------------------------------------------------
# Tokenizer


def train_tokenizer(docs: list[str]) -> Tokenizer:
    """Byte-level BPE with the Llama-3 split, so llama.cpp ("llama-bpe") tokenizes identically."""
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=N_VOCAB - len(USER_TOKENS),
        min_frequency=2,
        special_tokens=CONTROL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(docs, trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in USER_TOKENS])
    if tok.get_vocab_size() != N_VOCAB:
        raise RuntimeError(f"tokenizer has {tok.get_vocab_size()} tokens, expected {N_VOCAB}")
    return tok


def gguf_vocab(tok: Tokenizer) -> tuple[list[str], list[int], list[str]]:
    """Tokens by id, their llama.cpp token types, and the merges as "a b" strings."""
    by_id = sorted(tok.get_vocab(with_added_tokens=True).items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in by_id]
    types = [_token_type(t) for t in tokens]
    merges = json.loads(tok.to_str())["model"]["merges"]
    return tokens, types, [m if isinstance(m, str) else " ".join(m) for m in merges]


def silent_tokens(tok: Tokenizer) -> list[int]:
    """Ids the models should never emit: special tokens and any token that is not printable ASCII."""
    printable = set(map(chr, range(32, 127))) | {"\n", "\t"}
    special = set(CONTROL_TOKENS + USER_TOKENS)
    silent = []
    for token_id in range(tok.get_vocab_size()):
        text = tok.decode([token_id], skip_special_tokens=False)
        if tok.id_to_token(token_id) in special or not text or not set(text) <= printable:
            silent.append(token_id)
    return silent


def _token_type(token: str) -> int:
    if token in CONTROL_TOKENS:
        return int(TokenType.CONTROL)
    if token in USER_TOKENS:
        return int(TokenType.USER_DEFINED)
    return int(TokenType.NORMAL)


# ---------------------------------------------------------------------------------------------
# Weights (float32 numpy arrays in PyTorch layout: (out_features, in_features))


def target_weights(seed: int, shape: Shape, silent: list[int]) -> dict[str, np.ndarray]:
    """Seeded random llama weights; drawn in a fixed order so the bytes never change.

    Tokens in ``silent`` get an all-zero output row, hence logit 0, far below the usual maximum:
    greedy decoding never emits them (no end-of-text, no stray bytes), so generations run their
    full length and decode to readable text.
    """
    rng = np.random.default_rng(seed)
    d, dkv, ff = shape.n_embd, shape.n_embd_kv, shape.n_ff

    def normal(rows: int, cols: int, gain: float) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * (gain / np.sqrt(cols))).astype(np.float32)

    w: dict[str, np.ndarray] = {"token_embd.weight": normal(shape.n_vocab, d, np.sqrt(d))}
    for i in range(shape.n_layer):
        gain = 1.0 if i == 0 else LATE_LAYER_GAIN
        w[f"blk.{i}.attn_norm.weight"] = np.ones(d, dtype=np.float32)
        w[f"blk.{i}.attn_q.weight"] = normal(d, d, QK_GAIN)
        w[f"blk.{i}.attn_k.weight"] = normal(dkv, d, QK_GAIN)
        w[f"blk.{i}.attn_v.weight"] = normal(dkv, d, 1.0)
        w[f"blk.{i}.attn_output.weight"] = normal(d, d, gain)
        w[f"blk.{i}.ffn_norm.weight"] = np.ones(d, dtype=np.float32)
        w[f"blk.{i}.ffn_gate.weight"] = normal(ff, d, 1.0)
        w[f"blk.{i}.ffn_up.weight"] = normal(ff, d, 1.0)
        w[f"blk.{i}.ffn_down.weight"] = normal(d, ff, gain)
    w["output_norm.weight"] = np.ones(d, dtype=np.float32)
    out = normal(shape.n_vocab, d, LOGIT_GAIN)
    out[silent] = 0.0
    w["output.weight"] = out
    return w


def draft_weights(target: dict[str, np.ndarray], shape: Shape) -> dict[str, np.ndarray]:
    """The target's first ``shape.n_layer`` layers with its embedding and output head."""
    keep = {f"blk.{i}." for i in range(shape.n_layer)}
    return {k: v for k, v in target.items() if not k.startswith("blk.") or k[: k.index(".", 4) + 1] in keep}


# ---------------------------------------------------------------------------------------------
# GGUF


def write_gguf(
    path: Path, name: str, shape: Shape, weights: dict[str, np.ndarray], tok: Tokenizer, file_type: LlamaFileType
) -> None:
    """One llama GGUF: hyperparameters, tokenizer, chat template, tensors (2-D ones converted)."""
    writer = GGUFWriter(str(path), "llama")
    _add_model_metadata(writer, name, shape, file_type)
    _add_tokenizer_metadata(writer, tok)
    for tensor_name, array in weights.items():
        _add_tensor(writer, tensor_name, array, file_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _add_model_metadata(writer: GGUFWriter, name: str, shape: Shape, file_type: LlamaFileType) -> None:
    writer.add_name(name)
    writer.add_description(f"Random seeded weights for tests, made by scripts/make_tiny_models.py (seed {SEED})")
    writer.add_license("MIT")
    writer.add_file_type(int(file_type))
    writer.add_context_length(shape.n_ctx)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(shape.n_layer)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_rope_dimension_count(shape.n_embd // shape.n_head)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(shape.n_vocab)
    if file_type != LlamaFileType.ALL_F32:
        writer.add_quantization_version(2)


def _add_tokenizer_metadata(writer: GGUFWriter, tok: Tokenizer) -> None:
    tokens, types, merges = gguf_vocab(tok)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("llama-bpe")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_eot_token_id(EOS_ID)
    writer.add_pad_token_id(BOS_ID)
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)


def _add_tensor(writer: GGUFWriter, name: str, array: np.ndarray, file_type: LlamaFileType) -> None:
    if array.ndim == 1 or file_type == LlamaFileType.ALL_F32:
        writer.add_tensor(name, array.astype(np.float32))
    elif file_type == LlamaFileType.MOSTLY_F16:
        writer.add_tensor(name, array.astype(np.float16))
    elif file_type == LlamaFileType.MOSTLY_Q8_0:
        writer.add_tensor(name, quantize(array, GGMLQuantizationType.Q8_0), raw_dtype=GGMLQuantizationType.Q8_0)
    else:
        raise ValueError(f"unsupported file type {file_type!r}")


# ---------------------------------------------------------------------------------------------


def make_all(
    out: Path, seed: int = SEED, target_shape: Shape = TARGET_SHAPE, draft_shape: Shape = DRAFT_SHAPE, q8: bool = True
) -> dict[str, str]:
    """Write the files into ``out``; return their sha256 by file name."""
    out.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(build_corpus(seed))
    (out / TOKENIZER_FILE).write_text(tok.to_str(pretty=True) + "\n", encoding="utf-8")
    target = target_weights(seed, target_shape, silent_tokens(tok))
    write_gguf(out / TARGET_FILE, "frank-tiny-target", target_shape, target, tok, LlamaFileType.MOSTLY_F16)
    names = [TOKENIZER_FILE, TARGET_FILE, DRAFT_FILE]
    if q8:
        write_gguf(out / TARGET_Q8_FILE, "frank-tiny-target-q8", target_shape, target, tok, LlamaFileType.MOSTLY_Q8_0)
        names.append(TARGET_Q8_FILE)
    draft = draft_weights(target, draft_shape)
    write_gguf(out / DRAFT_FILE, "frank-tiny-draft", draft_shape, draft, tok, LlamaFileType.MOSTLY_F16)
    return {n: _sha256(out / n) for n in names}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def shapes_from_args(args: argparse.Namespace) -> tuple[Shape, Shape]:
    """Target and draft shapes from the size options (defaults: the shipped tiny shapes)."""
    t = TARGET_SHAPE
    target = Shape(
        n_layer=args.layers or t.n_layer,
        n_embd=args.hidden or t.n_embd,
        n_head=args.heads or t.n_head,
        n_head_kv=args.kv_heads or t.n_head_kv,
        n_ff=args.ff or t.n_ff,
        n_ctx=args.ctx or t.n_ctx,
    )
    if target.n_embd % target.n_head or target.n_head % target.n_head_kv:
        raise SystemExit(
            f"--hidden {target.n_embd} must divide by --heads {target.n_head}, "
            f"and --heads by --kv-heads {target.n_head_kv}"
        )
    layers = args.draft_layers or DRAFT_SHAPE.n_layer
    if not 1 <= layers <= target.n_layer:
        raise SystemExit(f"--draft-layers {layers}: must be between 1 and --layers {target.n_layer}")
    return target, replace(target, n_layer=layers)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default: the package data)")
    parser.add_argument("--seed", type=int, default=SEED, help=f"random seed (default: {SEED})")
    for flag, what in (
        ("--layers", "target layers"),
        ("--hidden", "n_embd"),
        ("--heads", "attention heads"),
        ("--kv-heads", "KV heads"),
        ("--ff", "feed-forward width"),
        ("--draft-layers", "draft layers"),
        ("--ctx", "context length"),
    ):
        parser.add_argument(flag, type=int, default=None, help=f"{what} (default: the shipped tiny model's)")
    parser.add_argument("--no-q8", action="store_true", help="skip the Q8_0 copy of the target")
    args = parser.parse_args(argv)
    target, draft = shapes_from_args(args)
    if (target, draft) != (TARGET_SHAPE, DRAFT_SHAPE) and args.out.resolve() == DEFAULT_OUT.resolve():
        raise SystemExit("other sizes need --out DIR: the package data holds the shipped tiny models")
    params = parameters(target)
    print(
        f"target: {target.n_layer} layers, n_embd {target.n_embd}, {params:,} parameters; draft: {draft.n_layer} layer(s)"
    )
    for name, digest in make_all(args.out, args.seed, target, draft, q8=not args.no_q8).items():
        size = (args.out / name).stat().st_size
        print(f"{digest}  {size:>9}  {name}")
    return 0


def parameters(shape: Shape) -> int:
    """Parameters of a target of this shape (embedding, output head, norms, layers)."""
    d, dkv, ff, v = shape.n_embd, shape.n_embd_kv, shape.n_ff, shape.n_vocab
    per_layer = 2 * d * d + 2 * dkv * d + 3 * ff * d + 2 * d
    return 2 * v * d + d + per_layer * shape.n_layer


if __name__ == "__main__":
    sys.exit(main())
