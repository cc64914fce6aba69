"""``frank serve`` in front of a GGUF-only model: the tokenizer is rebuilt from the GGUF's metadata and
counts exactly like the engine's ``/tokenize`` on a fuzzed set of prompts (unicode, whitespace runs,
code, added tokens, prompts long enough to be cut into cached chunks); where no tokenizer can be had,
the engine counts and the cache is off with the reason printed."""

from __future__ import annotations


import os
import random
import shutil
import signal
import subprocess
import sys
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
def test_smollm2_gguf_counts_exactly_like_the_engine(tmp_path: Path, llama_server_bin: str) -> None:
    model = Path(
        os.environ.get("FRANK_REAL_MODEL")
        or Path.home() / ".cache" / "frankenstein" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    )
    if not model.is_file():
        pytest.fail(f"{model}: the real model is missing; run `make real-model` (scripts/fetch_real_model.py)")
    assert not (model.parent / "tokenizer.json").exists()  # what this test is about
    args = '["--ctx-size", "2048", "--threads", "1", "--parallel", "1", "--jinja"]'
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


def unknown_typed_copy(tmp_path: Path, token: str) -> Path:
    """A copy of the tiny GGUF, away from its tokenizer.json, whose ``token`` is typed UNKNOWN (2) in
    ``tokenizer.ggml.token_type`` (edited in place with the ``gguf`` reader). llama.cpp's ``/tokenize`` (special
    tokens parsed) then cuts that token out of any text as a special token; the rebuild keeps it an ordinary
    BPE token (only control and user-defined tokens become added tokens), so the two disagree."""
    import gguf

    model = tmp_path / "models" / "tiny-target.gguf"
    model.parent.mkdir()
    shutil.copy(data_path("tiny-target.gguf"), model)
    reader = gguf.GGUFReader(str(model), "r+")
    types = reader.fields["tokenizer.ggml.token_type"]
    idx = list(reader.fields["tokenizer.ggml.tokens"].contents()).index(token)
    types.parts[types.data[idx]][0] = 2
    del reader  # flushes the memmap
    assert gguf.GGUFReader(str(model)).fields["tokenizer.ggml.token_type"].contents()[idx] == 2
    return model


@pytest.mark.engine
def test_a_rebuilt_tokenizer_the_engine_disagrees_with_turns_the_cache_off(
    tmp_path: Path, llama_server_bin: str
) -> None:
    """The GGUF-rebuilt tokenizer and the real llama-server disagree on the probes: ``frank serve`` does not
    serve the rebuild's counts; it prints the cache off with the mismatch, and counts come from /tokenize."""
    from frankenstein.regioncache.gguf import gguf_tokenizer

    model = unknown_typed_copy(tmp_path, "l")
    rebuilt = gguf_tokenizer(model)  # still rebuilt: the edit is one the rebuild does not see
    probe = "Hello world\n"
    ours = rebuilt.encode(probe, add_special_tokens=False).ids
    proc, _ = serve_campaign(tmp_path, model, '["--ctx-size", "2048", "--threads", "1", "--parallel", "1"]')
    try:
        url, engine = wait_listening(proc)
        line = status_line(proc)
        with httpx.Client(trust_env=False, timeout=120) as c:
            theirs = c.post(engine + "/tokenize", json={"content": probe}).json()["tokens"]
        assert theirs != ours  # the two really disagree: the engine cuts every "l" out
        source = "rebuilt from the GGUF metadata of tiny-target.gguf"
        assert line.startswith(
            f"region cache: off (counts come from the engine's /tokenize: the tokenizer {source} differs from the "
            f"engine's ({source} does not match the engine's tokenizer: {probe!r} is {ours} here and {theirs} in "
            "the engine)); counts are the engine's own /tokenize (llama.cpp dialect); count_tokens by "
        ), line
        prompts = fuzzed_prompts(seed=5, n=12)
        agree_with_engine(url, engine, prompts)  # every count is the engine's ...
        differs = [
            p
            for p in prompts
            if len(rebuilt.encode(p, add_special_tokens=False).ids)
            != len(httpx.post(engine + "/tokenize", json={"content": p}, trust_env=False).json()["tokens"])
        ]
        assert differs  # ... where the rebuild would have counted otherwise
        st = httpx.get(url + "/frank/status", trust_env=False).json()
        assert st["enabled"] is False and st["reason"].startswith("counts come from the engine's /tokenize")
    finally:
        stop(proc)


@pytest.mark.engine
def test_without_the_gguf_package_serve_says_to_install_the_models_extra(tmp_path: Path, llama_server_bin: str) -> None:
    """A plain install (no ``models`` extra): the real CLI in a Python where ``gguf`` cannot be imported
    (``sys.modules["gguf"] = None``, how Python marks a module absent) in front of a GGUF-only model counts
    through the engine, and the printed reason says to install ``frankenstein[models]``."""
    model = tmp_path / "models" / "tiny-target.gguf"
    model.parent.mkdir()
    shutil.copy(data_path("tiny-target.gguf"), model)
    camp = tmp_path / "camp"
    init_campaign(
        camp,
        toml=f'name = "t"\nserved = "base"\n\n[recipes.base]\nengine = "llamacpp"\nmodel = "{model}"\n'
        'args = ["--ctx-size", "2048", "--threads", "1", "--parallel", "1"]\nstart_timeout_s = 120\n',
    ).close()
    no_gguf = "import runpy, sys; sys.modules['gguf'] = None; runpy.run_module('frankenstein', run_name='__main__')"
    args = ["serve", "-c", str(camp), "--listen", f"127.0.0.1:{free_port()}"]
    proc = subprocess.Popen(
        [sys.executable, "-c", no_gguf, *args],
        cwd=tmp_path,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        url, engine = wait_listening(proc)
        line = status_line(proc)
        assert line.startswith(
            "region cache: off (counts come from the engine's /tokenize: no tokenizer.json beside the model, and "
            "the gguf package is not installed; install frankenstein[models] (pip install 'frankenstein[models]') "
            "to rebuild the tokenizer from the GGUF); counts are the engine's own /tokenize (llama.cpp dialect)"
        ), line
        agree_with_engine(url, engine, fuzzed_prompts(seed=6, n=3))
    finally:
        stop(proc)
