"""``frank serve --upstream`` in front of a real vLLM (``.venv-vllm``, the tiny Hugging Face Llama): the
model directory vLLM names in ``/v1/models`` holds the ``tokenizer.json``, the tokenizer is checked
against vLLM's own ``/tokenize`` in vLLM's dialect (``prompt``/``add_special_tokens``), and every count
the front gives equals vLLM's on a fuzzed set of prompts; counting through vLLM's ``/tokenize`` (the
cache off) agrees too. Traffic is kept as observations of the campaign named with ``--campaign``.

One vLLM start for the module (about a minute on two cores)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_serve import start_cli, wait_listening
from test_serve_tokenizer import fuzzed_prompts
from test_vllm import _recipe, tiny_hf, vllm_python  # noqa: F401 - tiny_hf, vllm_python: fixtures

from frankenstein.campaign import init_campaign, open_campaign
from frankenstein.engines import start_engine
from frankenstein.engines.process import free_port
from frankenstein.engines.vllm import VllmEngine
from frankenstein.regioncache.engine_count import EngineCounter
from frankenstein.regioncache.proxy import start_front
from frankenstein.regioncache.tokenize_api import OPENAI, find_tokenize

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def vllm(tiny_hf: Path, vllm_python: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmEngine]:  # noqa: F811
    recipe = _recipe(tiny_hf, vllm_python, spec=False)
    with start_engine(recipe, tmp_path_factory.mktemp("vllm-logs")) as eng:
        assert isinstance(eng, VllmEngine)
        yield eng


def theirs(c: httpx.Client, engine: str, text: str, special: bool) -> list[int]:
    r = c.post(engine + "/tokenize", json={"prompt": text, "add_special_tokens": special})
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    assert answer["count"] == len(answer["tokens"])
    return [int(t) for t in answer["tokens"]]


def agree_with_vllm(front: str, engine: str, prompts: list[str]) -> None:
    """The front's /tokenize, /count (with and without special tokens) and count_tokens against vLLM's
    own /tokenize (text, and the chat form that renders the model's template)."""
    with httpx.Client(trust_env=False, timeout=300) as c:
        for text in prompts:
            assert c.post(front + "/tokenize", json={"content": text}).json() == {
                "tokens": theirs(c, engine, text, False)
            }, repr(text[:200])
            for special in (False, True):
                body = {"content": text, "add_special": special}
                want = {"count": len(theirs(c, engine, text, special))}
                assert c.post(front + "/count", json=body).json() == want, repr(text[:200])
            messages = [{"role": "user", "content": text}]
            chat = c.post(engine + "/tokenize", json={"messages": messages, "add_generation_prompt": True})
            assert chat.status_code == 200, chat.text
            ours = c.post(front + "/v1/messages/count_tokens", json={"model": "m", "messages": messages})
            assert ours.json() == {"input_tokens": chat.json()["count"]}, repr(text[:200])
            # a vLLM client's own /tokenize shapes reach vLLM through the front, answered as vLLM answers
            native = {"prompt": text, "add_special_tokens": True}
            assert c.post(front + "/tokenize", json=native).json() == c.post(engine + "/tokenize", json=native).json()
            chat_body = {"messages": messages, "add_generation_prompt": True}
            assert c.post(front + "/tokenize", json=chat_body).json() == chat.json()


def test_frank_serve_upstream_counts_exactly_like_vllm(vllm: VllmEngine, tiny_hf: Path, tmp_path: Path) -> None:  # noqa: F811
    """The real CLI with ``--upstream`` and ``--campaign``: tokenizer.json found inside the model
    directory vLLM serves, checked in vLLM's dialect, 40 fuzzed prompts agree, observations kept."""
    camp = tmp_path / "camp"
    init_campaign(
        camp,
        toml=f'name = "v"\nserved = "base"\n\n[recipes.base]\nengine = "vllm"\nmodel = "{tiny_hf}"\n',
    ).close()
    proc = start_cli("--upstream", vllm.base_url, "-c", str(camp), "--listen", f"127.0.0.1:{free_port()}", cwd=tmp_path)
    try:
        url, engine = wait_listening(proc)
        assert engine == vllm.base_url
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("region cache: on ("), line
        assert f"tokenizer {tiny_hf / 'tokenizer.json'}; tokenizer matches the engine's /tokenize (vLLM/SGLang" in line
        assert line.rstrip().endswith("count_tokens by chat template (jinja2)"), line
        observing = proc.stdout.readline()
        assert observing.startswith(f"frank serve: observations kept in {camp}, tagged with the base recipe"), observing
        prompts = fuzzed_prompts(seed=11, n=40)
        agree_with_vllm(url, engine, prompts)
        st = httpx.get(url + "/frank/status", trust_env=False).json()
        assert st["enabled"] and st["chunks_hit"] > 0  # long and extended prompts were counted from chunks
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    with open_campaign(camp) as c:
        rows = c.store.served_requests()
    routes = {r.route for r in rows}
    assert routes == {"tokenize", "count", "count_tokens"}  # GET /frank/status is frank's own, not kept
    # per prompt: /tokenize, /count twice, count_tokens, and vLLM's own two /tokenize shapes through the front
    assert len(rows) == 6 * 40 and all(r.step is None and r.status == 200 for r in rows)


def test_counting_through_vllm_tokenize_agrees(vllm: VllmEngine) -> None:
    """No tokenizer here: the dialect is found by probing (llama.cpp's body is refused by vLLM, then
    vLLM's), and the front's counts through vLLM's /tokenize equal vLLM's own."""
    api = find_tokenize(vllm.base_url)
    assert api is not None and api.dialect is OPENAI
    counter = EngineCounter(api, "no tokenizer here (test)")
    with (
        start_front(vllm.base_url, counter) as front,
        httpx.Client(trust_env=False, timeout=300) as c,
    ):
        for text in fuzzed_prompts(seed=12, n=30):
            for special in (False, True):
                want = {"count": len(theirs(c, vllm.base_url, text, special))}
                assert c.post(front.url + "/count", json={"content": text, "add_special": special}).json() == want
        assert counter.status().requests == 60
