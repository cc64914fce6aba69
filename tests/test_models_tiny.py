"""The tiny models shipped in frankenstein/data: present, reproducible from the script, well-formed.

No llama-server here (the engine tests serve these files); this checks the files themselves.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize
from tokenizers import Tokenizer

from frankenstein.shipped import data_path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "make_tiny_models.py"
FILES = ("tiny-tokenizer.json", "tiny-target.gguf", "tiny-draft.gguf", "tiny-target-q8.gguf")
GGUFS = FILES[1:]


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_tiny_models", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return _load_script()


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run the script as a user would, into a fresh folder (about a second)."""
    out = tmp_path_factory.mktemp("tiny")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return out


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _field(reader: GGUFReader, key: str) -> object:
    field = reader.get_field(key)
    assert field is not None, f"missing GGUF key {key}"
    return field.contents()


def _tensors(path: Path) -> dict[str, tuple[GGMLQuantizationType, bytes]]:
    return {t.name: (t.tensor_type, t.data.tobytes()) for t in GGUFReader(path).tensors}


@pytest.mark.parametrize("name", FILES)
def test_shipped_file_exists(name: str) -> None:
    path = data_path(name)
    assert path.is_file(), f"{path} is missing: run scripts/make_tiny_models.py"
    assert path.stat().st_size > 10_000


def test_target_and_draft_together_stay_small() -> None:
    total = data_path("tiny-target.gguf").stat().st_size + data_path("tiny-draft.gguf").stat().st_size
    assert total < 10_000_000


def test_regeneration_is_byte_identical(script: ModuleType, regenerated: Path) -> None:
    installed = {name: version(name) for name in script.MADE_WITH}
    if installed != script.MADE_WITH:
        pytest.skip(f"byte identity is promised only with {script.MADE_WITH}; installed {installed}")
    for name in FILES:
        assert _sha256(regenerated / name) == _sha256(data_path(name)), f"{name} differs from a regeneration"


@pytest.mark.parametrize("name", GGUFS)
def test_regenerated_tensors_match_shipped(name: str, regenerated: Path) -> None:
    """Weaker than byte identity but independent of writer versions: same names, types and data."""
    assert _tensors(regenerated / name) == _tensors(data_path(name))


@pytest.mark.parametrize(
    ("name", "n_layer"), [("tiny-target.gguf", 4), ("tiny-draft.gguf", 1), ("tiny-target-q8.gguf", 4)]
)
def test_gguf_metadata(name: str, n_layer: int) -> None:
    reader = GGUFReader(data_path(name))
    assert _field(reader, "general.architecture") == "llama"
    assert _field(reader, "llama.block_count") == n_layer
    assert _field(reader, "llama.embedding_length") == 192
    assert _field(reader, "tokenizer.ggml.model") == "gpt2"
    assert _field(reader, "tokenizer.ggml.pre") == "llama-bpe"
    assert _field(reader, "tokenizer.ggml.bos_token_id") == 0
    assert _field(reader, "tokenizer.ggml.eos_token_id") == 2
    assert _field(reader, "tokenizer.ggml.add_bos_token") is False
    assert len(_field(reader, "tokenizer.ggml.merges")) > 1000  # type: ignore[arg-type]
    assert "tool_calls" in str(_field(reader, "tokenizer.chat_template"))


def test_gguf_vocabulary_is_the_shipped_tokenizer() -> None:
    """The region cache tokenizes with the JSON; llama.cpp with the GGUF vocabulary: they must agree."""
    tok = Tokenizer.from_file(str(data_path("tiny-tokenizer.json")))
    by_id = sorted(tok.get_vocab(with_added_tokens=True).items(), key=lambda kv: kv[1])
    for name in GGUFS:
        tokens = _field(GGUFReader(data_path(name)), "tokenizer.ggml.tokens")
        assert tokens == [t for t, _ in by_id], name
    types = _field(GGUFReader(data_path("tiny-target.gguf")), "tokenizer.ggml.token_type")
    assert types[:3] == [3, 3, 3] and types[-2:] == [4, 4]  # type: ignore[index]


def test_tokenizer_splits_code_and_text_into_words() -> None:
    tok = Tokenizer.from_file(str(data_path("tiny-tokenizer.json")))
    words = ["Ġcan", "Ġyou", "Ġexplain", "Ġwhy", "Ġthe", "Ġtest"]
    assert tok.encode(" can you explain why the test fails?").tokens[:6] == words
    assert tok.encode("<|im_start|>user\n").ids[0] == 1
    code = "def f(x: int) -> int:\n    return x\n"
    assert tok.decode(tok.encode(code).ids) == code


def test_draft_is_the_targets_first_layer() -> None:
    target = _tensors(data_path("tiny-target.gguf"))
    draft = _tensors(data_path("tiny-draft.gguf"))
    assert set(draft) == {n for n in target if not n.startswith(("blk.1.", "blk.2.", "blk.3."))}
    assert all(draft[n] == target[n] for n in draft)


def test_q8_target_differs_slightly_from_f16_target() -> None:
    """The quantized part must have a small, real numeric effect (the fidelity gate measures it)."""
    target = {t.name: t for t in GGUFReader(data_path("tiny-target.gguf")).tensors}
    q8 = {t.name: t for t in GGUFReader(data_path("tiny-target-q8.gguf")).tensors}
    ref = target["blk.0.ffn_up.weight"]
    quant = q8["blk.0.ffn_up.weight"]
    assert ref.tensor_type == GGMLQuantizationType.F16 and quant.tensor_type == GGMLQuantizationType.Q8_0
    a = np.asarray(ref.data, dtype=np.float32)
    b = dequantize(quant.data, GGMLQuantizationType.Q8_0).reshape(a.shape)
    rel = float(np.abs(a - b).max() / np.abs(a).max())
    assert 0 < rel < 0.01


def test_chat_template_renders_tools_calls_and_results() -> None:
    jinja2 = pytest.importorskip("jinja2")
    template = str(_field(GGUFReader(data_path("tiny-target.gguf")), "tokenizer.chat_template"))
    env = jinja2.Environment()
    env.filters["tojson"] = lambda v: json.dumps(v)
    call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    messages = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "21 C"},
    ]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    text = env.from_string(template).render(messages=messages, tools=tools, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\n# Tools\n")
    assert '<tools>\n{"type": "function", "function": {"name": "get_weather"' in text
    assert text.endswith(
        "<|im_start|>user\nWeather?<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n21 C\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
