"""``frank serve`` in front of a GGUF-only model: the tokenizer is rebuilt from the GGUF's metadata and
counts exactly like the engine's ``/tokenize`` on a fuzzed set of prompts (unicode, whitespace runs,
code, added tokens, prompts long enough to be cut into cached chunks); where no tokenizer can be had,
the engine counts and the cache is off with the reason printed."""

from __future__ import annotations

import json

import os
import random
import shutil
import signal
import subprocess
from pathlib import Path

import httpx
import pytest
from test_serve import EngineTestDouble, double, start_cli, tok, wait_listening  # noqa: F401, F811 - double: a fixture

from frankenstein.campaign import init_campaign
from frankenstein.engines.process import free_port
from frankenstein.regioncache.reference import ATOMS
from frankenstein.regioncache.service import ServeOptions, serving
from frankenstein.shipped import data_path

EXTRA = (
    "𝟙𝟚𝟛",
    "½¾",
    "٣٤٥",
    "Ⅻ",
    "x²³",
    "ｆｕｌｌ",
    "😀😀😀",
    "ǅ",
    "  \n  \n",
    "\t\t\n\n\n    x",
    "'S",
    "'LL",
    "don’t",
    "    if x:\n        return [i for i in range(10)]\n",
    "</s>",
    "<|endoftext|><|im_start|>assistant\n",
)


def fuzzed_prompts(seed: int, n: int) -> list[str]:
    """Seeded prompts of ATOMS + EXTRA; every 10th is long (cut into chunks), every 7th extends the one before."""
    rng = random.Random(seed)
    pieces = ATOMS + EXTRA
    out: list[str] = []
    for i in range(n):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 120)))
        if i % 10 == 0:
            text = "".join(rng.choice(pieces) for _ in range(3000))
        elif i % 7 == 0 and out:
            text = out[-1] + text
        out.append(text)
    return out


def agree_with_engine(front: str, engine: str, prompts: list[str]) -> None:
    with httpx.Client(trust_env=False, timeout=120) as c:
        for text in prompts:
            theirs = c.post(engine + "/tokenize", json={"content": text}).json()["tokens"]
            assert c.post(front + "/tokenize", json={"content": text}).json()["tokens"] == theirs, repr(text[:200])
            for special in (False, True):
                theirs_n = len(
                    c.post(engine + "/tokenize", json={"content": text, "add_special": special}).json()["tokens"]
                )
                body = {"content": text, "add_special": special}
                assert c.post(front + "/count", json=body).json() == {"count": theirs_n}, repr(text[:200])


def serve_campaign(tmp_path: Path, model: Path, args: str) -> tuple[subprocess.Popen[str], Path]:
    camp = tmp_path / "camp"
    init_campaign(
        camp,
        toml=f'name = "t"\nserved = "base"\n\n[recipes.base]\nengine = "llamacpp"\nmodel = "{model}"\n'
        f"args = {args}\nstart_timeout_s = 120\n",
    ).close()
    return start_cli("-c", str(camp), "--listen", f"127.0.0.1:{free_port()}", cwd=tmp_path), camp


def status_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    return proc.stdout.readline()


def stop(proc: subprocess.Popen[str]) -> str:
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    return err


@pytest.mark.engine
def test_tiny_gguf_without_tokenizer_json_counts_like_the_engine(tmp_path: Path, llama_server_bin: str) -> None:
    model = tmp_path / "models" / "tiny-target.gguf"  # away from the shipped tokenizer.json: GGUF only
    model.parent.mkdir()
    shutil.copy(data_path("tiny-target.gguf"), model)
    proc, _ = serve_campaign(tmp_path, model, '["--ctx-size", "2048", "--threads", "1", "--parallel", "1"]')
    try:
        url, engine = wait_listening(proc)
        line = status_line(proc)
        assert line.startswith("region cache: on (llama3+bytelevel: cut"), line
        assert "tokenizer rebuilt from the GGUF metadata of tiny-target.gguf" in line
        assert "tokenizer matches the engine's /tokenize" in line
        agree_with_engine(url, engine, fuzzed_prompts(seed=3, n=30))
        st = httpx.get(url + "/frank/status", trust_env=False).json()
        assert st["enabled"] and st["chunks_hit"] > 0  # long and extended prompts were counted from chunks
        # --upstream: the model file is the one llama.cpp names in /props, so the same GGUF is rebuilt
        lines: list[str] = []
        with serving(ServeOptions(upstream=engine, listen="127.0.0.1:0"), echo=lines.append) as front:
            assert "tokenizer rebuilt from the GGUF metadata of tiny-target.gguf" in lines[1], lines
            agree_with_engine(front.url, engine, fuzzed_prompts(seed=4, n=5))
    finally:
        stop(proc)


@pytest.mark.real
@pytest.mark.engine
def test_smollm2_gguf_counts_exactly_like_the_engine(
    tmp_path: Path, llama_server_bin: str, real_model_cpu_args: list[str]
) -> None:
    model = Path(
        os.environ.get("FRANK_REAL_MODEL")
        or Path.home() / ".cache" / "frankenstein" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    )
    if not model.is_file():
        pytest.fail(f"{model}: the real model is missing; run `make real-model` (scripts/fetch_real_model.py)")
    assert not (model.parent / "tokenizer.json").exists()  # what this test is about
    args = json.dumps(["--ctx-size", "2048", "--threads", "1", "--parallel", "1", "--jinja", *real_model_cpu_args])
    proc, _ = serve_campaign(tmp_path, model, args)
    try:
        url, engine = wait_listening(proc)
        line = status_line(proc)
        assert line.startswith("region cache: on (digits-1+gpt2: cut after a lone"), line
        assert f"tokenizer rebuilt from the GGUF metadata of {model.name}" in line
        agree_with_engine(url, engine, fuzzed_prompts(seed=1, n=150))
        st = httpx.get(url + "/frank/status", trust_env=False).json()
        assert st["enabled"] and st["chunks_hit"] > 0 and st["disabled_by_shadow"] is None
    finally:
        stop(proc)


def test_without_any_tokenizer_the_engine_counts_and_the_cache_is_off(double: EngineTestDouble) -> None:  # noqa: F811
    """An engine that names no model file (no /props) and no --tokenizer: counts are the engine's own."""
    lines: list[str] = []
    with serving(ServeOptions(upstream=double.url, listen="127.0.0.1:0"), echo=lines.append) as front:
        assert lines[1].startswith(
            "region cache: off (counts come from the engine's /tokenize: the engine names no model file and no "
            "--tokenizer was given)"
        ), lines
        text = "def f(x):\n    return x\n" * 50
        want = len(tok().encode(text, add_special_tokens=False).ids)
        assert httpx.post(front.url + "/count", json={"content": text}, trust_env=False).json() == {"count": want}
        assert double.seen[-1][:2] == ("POST", "/tokenize")  # the engine was asked


def _gguf(path: Path, model: str, pre: str) -> Path:
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model(model)
    w.add_tokenizer_pre(pre)
    w.add_token_list(["a", "b", "ab"])
    w.add_token_types([1, 1, 1])
    w.add_token_merges(["a b"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_gguf_that_cannot_be_rebuilt_says_why(tmp_path: Path) -> None:
    from frankenstein.regioncache.service import choose_tokenizer

    spm = choose_tokenizer(None, str(_gguf(tmp_path / "spm.gguf", "llama", "default")))
    assert spm.tokenizer is None
    assert spm.source == (
        "no tokenizer.json beside the model, and spm.gguf: tokenizer.ggml.model = 'llama'; "
        "only byte-level BPE ('gpt2') is rebuilt"
    )
    other = choose_tokenizer(None, str(_gguf(tmp_path / "ds.gguf", "gpt2", "deepseek-llm")))
    assert other.tokenizer is None and "tokenizer.ggml.pre = 'deepseek-llm' has no rebuilt equivalent" in other.source
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf at all")
    junk = choose_tokenizer(None, str(tmp_path / "junk.gguf"))
    assert junk.tokenizer is None and "junk.gguf: not a readable GGUF file" in junk.source
    ok = choose_tokenizer(None, str(_gguf(tmp_path / "bpe.gguf", "gpt2", "gpt-2")))
    assert ok.tokenizer is not None and ok.tokenizer.encode("ab").ids == [2]
