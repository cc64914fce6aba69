#!/usr/bin/env python3
"""Make a tiny Hugging Face Llama folder (config + safetensors + tokenizer) for vLLM and SGLang tests.

Why: vLLM and SGLang load Hugging Face folders, not GGUF. This writes the *same network* as the
shipped ``tiny-target.gguf``: the seeded weights of ``scripts/make_tiny_models.py`` (same seed, same
draw order), rounded through float16 as the GGUF stores them, with the query/key rows put back into
Hugging Face's rotary layout (llama.cpp rotates adjacent pairs, Hugging Face rotates halves). So
greedy decoding on vLLM and on llama-server gives the same tokens, which a test checks.

The tokenizer is the shipped ``tiny-tokenizer.json`` (vocabulary 1536) with the ChatML chat template
in ``tokenizer_config.json``. Weights are float32 (about 9 MB), written by hand in the safetensors
format so the script needs only numpy and tokenizers (the project's own dependencies). It takes
well under a second and is byte-for-byte reproducible; tests generate it into a cache folder.

Usage: python scripts/make_tiny_hf_llama.py --out DIR [--seed N] [--context N]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import shutil
import struct
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
from tokenizers import Tokenizer

HERE = Path(__file__).resolve().parent
TOKENIZER = HERE.parent / "src" / "frankenstein" / "data" / "tiny-tokenizer.json"
FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors")


def _tiny_models() -> ModuleType:
    """``scripts/make_tiny_models.py`` as a module: the one place the seeded weights are drawn."""
    spec = importlib.util.spec_from_file_location("make_tiny_models", HERE / "make_tiny_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def to_hf_rotary(w: np.ndarray, n_head: int) -> np.ndarray:
    """Rows of a q/k projection from llama.cpp's rotary layout (pairs 2i, 2i+1) to Hugging Face's
    (pairs i, i + head_dim/2): the inverse of the permutation ``convert_hf_to_gguf.py`` applies."""
    rows, cols = w.shape
    return w.reshape(n_head, rows // n_head // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def hf_weights(tm: ModuleType, seed: int) -> dict[str, np.ndarray]:
    """The target's weights under Hugging Face ``LlamaForCausalLM`` names, float32."""
    shape = tm.TARGET_SHAPE
    silent = tm.silent_tokens(Tokenizer.from_file(str(TOKENIZER)))
    g = {
        k: (v.astype(np.float16) if v.ndim == 2 else v).astype(np.float32)
        for k, v in tm.target_weights(seed, shape, silent).items()
    }
    out = {
        "model.embed_tokens.weight": g["token_embd.weight"],
        "model.norm.weight": g["output_norm.weight"],
        "lm_head.weight": g["output.weight"],
    }
    for i in range(shape.n_layer):
        b, p = f"blk.{i}.", f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = g[b + "attn_norm.weight"]
        out[p + "self_attn.q_proj.weight"] = to_hf_rotary(g[b + "attn_q.weight"], shape.n_head)
        out[p + "self_attn.k_proj.weight"] = to_hf_rotary(g[b + "attn_k.weight"], shape.n_head_kv)
        out[p + "self_attn.v_proj.weight"] = g[b + "attn_v.weight"]
        out[p + "self_attn.o_proj.weight"] = g[b + "attn_output.weight"]
        out[p + "post_attention_layernorm.weight"] = g[b + "ffn_norm.weight"]
        out[p + "mlp.gate_proj.weight"] = g[b + "ffn_gate.weight"]
        out[p + "mlp.up_proj.weight"] = g[b + "ffn_up.weight"]
        out[p + "mlp.down_proj.weight"] = g[b + "ffn_down.weight"]
    return out


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """The safetensors format: u64 header length, JSON header (dtype, shape, byte offsets), raw data."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name in sorted(tensors):
        a = tensors[name]
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for name in sorted(tensors):
            f.write(np.ascontiguousarray(tensors[name], dtype="<f4").tobytes())


def config(tm: ModuleType, context: int) -> dict[str, object]:
    s = tm.TARGET_SHAPE
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "torch_dtype": "float32",
        "hidden_size": s.n_embd,
        "intermediate_size": s.n_ff,
        "num_hidden_layers": s.n_layer,
        "num_attention_heads": s.n_head,
        "num_key_value_heads": s.n_head_kv,
        "head_dim": s.n_embd // s.n_head,
        "vocab_size": s.n_vocab,
        "max_position_embeddings": context,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": tm.BOS_ID,
        "eos_token_id": tm.EOS_ID,
        "pad_token_id": tm.BOS_ID,
    }


def tokenizer_config(tm: ModuleType, context: int) -> dict[str, object]:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|endoftext|>",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "add_bos_token": False,
        "add_eos_token": False,
        "model_max_length": context,
        "clean_up_tokenization_spaces": False,
        "chat_template": tm.CHAT_TEMPLATE,
    }


def make(out: Path, seed: int | None = None, context: int = 4096) -> dict[str, str]:
    """Write the folder; return the sha256 of each file by name."""
    tm = _tiny_models()
    seed = tm.SEED if seed is None else seed
    out.mkdir(parents=True, exist_ok=True)
    dump = lambda obj: json.dumps(obj, indent=2, sort_keys=True) + "\n"  # noqa: E731
    (out / "config.json").write_text(dump(config(tm, context)))
    (out / "generation_config.json").write_text(dump({"bos_token_id": tm.BOS_ID, "eos_token_id": tm.EOS_ID}))
    (out / "tokenizer_config.json").write_text(dump(tokenizer_config(tm, context)))
    shutil.copyfile(TOKENIZER, out / "tokenizer.json")
    write_safetensors(out / "model.safetensors", hf_weights(tm, seed))
    return {n: hashlib.sha256((out / n).read_bytes()).hexdigest() for n in FILES}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: make_tiny_models.SEED)")
    parser.add_argument("--context", type=int, default=4096, help="max_position_embeddings (default: 4096)")
    args = parser.parse_args(argv)
    for name, digest in make(args.out, args.seed, args.context).items():
        print(f"{digest}  {(args.out / name).stat().st_size:>9}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
