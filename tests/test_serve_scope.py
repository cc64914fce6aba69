"""``frank adopt --scope``: what a part is adopted for, as data, held by ``frank serve``.

A campaign's draft part is adopted for concurrency 1 through the real CLI; ``frank serve`` then starts the
served recipe's real llama-server and two real clients talk to it at once over 127.0.0.1. The first client
holds its place by sending its request line and headers and only half of its body (the front takes the place
when the request line is read), so the second one meets a full front deterministically, without timing.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from conftest import frank

from frankenstein import ledger
from frankenstein.campaign import open_campaign
from frankenstein.errors import ConfigError
from frankenstein.regioncache.admission import Admission
from frankenstein.regioncache.service import ServeOptions, serving
from frankenstein.report import write_report
from frankenstein.scope import parse_scope, scope_words, served_adoptions, served_scope

from helpers_campaign import make_campaign, make_workload
from helpers_cli import cli
from helpers_ledger import CONFIRMED, stored_design
from test_serve import TOKENIZER, EngineTestDouble, start_cli, tok, wait_listening

NOTE = "single stream only; concurrency 5 and above is not yet fidelity-checked"
CHAT = json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}).encode()


@pytest.fixture
def adopted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A campaign serving `draft`, adopted for concurrency 1 through the CLI."""
    camp = make_campaign(tmp_path / "c")
    make_workload(camp.root / "workloads" / "w.jsonl")
    reg = stored_design(camp, name="draft-speed", served=CONFIRMED[0], candidate=CONFIRMED[1])
    camp.close()
    code, out, err = cli(
        capsys, "adopt", "draft", "-d", reg.design_id, "--scope", "concurrency=1", "--scope", f"note={NOTE}",
        "-c", str(tmp_path / "c"),
    )  # fmt: skip
    assert code == 0, err
    assert f"  adopted for: concurrency 1 (one request at a time); note: {NOTE}" in out
    return tmp_path / "c"


def held_request(url: str, path: str = "/v1/chat/completions") -> socket.socket:
    """A client that sends a request's line, headers and half its body, and waits: its place is taken."""
    host, port = url.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)), timeout=60)
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    s.sendall(f"{head}Content-Length: {len(CHAT)}\r\n\r\n".encode() + CHAT[:10])
    return s


def finish(s: socket.socket) -> bytes:
    """Send the rest of the body and read the whole answer (the front closes after it: Connection: close)."""
    s.sendall(CHAT[10:])
    s.shutdown(socket.SHUT_WR)
    data = b""
    while chunk := s.recv(65536):
        data += chunk
        if data.endswith(b"\r\n0\r\n\r\n"):
            break
    s.close()
    return data


def until(check: Callable[[], bool], seconds: float = 60.0) -> None:
    """Poll ``check`` every 10 ms until it holds; fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def status(url: str) -> dict:
    return httpx.get(url + "/frank/status", trust_env=False, timeout=30).json()["admission"]


def test_scope_keys_are_checked(tmp_path: Path) -> None:
    assert parse_scope(["concurrency=1", "context=32768", f"note={NOTE}"]).recorded() == {
        "concurrency": 1,
        "context": 32768,
        "note": NOTE,
    }
    for bad, field in (
        (["threads=4"], "--scope"),
        (["concurrency=0"], "--scope"),
        (["concurrency=many"], "--scope"),
        (["concurrency"], "--scope"),
        (["note=a", "note=b"], "--scope note"),
    ):
        with pytest.raises(ConfigError) as e:
            parse_scope(bad)
        assert e.value.field == field, bad
    with pytest.raises(ConfigError, match="unknown field .*keys: concurrency, context, gpus"):
        parse_scope(["threads=4"])
    assert scope_words({"concurrency": 4, "gpus": 2}) == "concurrency up to 4; GPUs 2"


def test_a_bad_scope_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path / "c")
    make_workload(camp.root / "workloads" / "w.jsonl")
    reg = stored_design(camp, name="draft-speed", served=CONFIRMED[0], candidate=CONFIRMED[1])
    camp.close()
    r = frank("adopt", "draft", "-d", reg.design_id, "--scope", "concurrency=-1", "-c", str(tmp_path / "c"))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "--scope: concurrency" in r.stderr
    with open_campaign(tmp_path / "c") as c:
        assert c.store.ledger_steps() == []


def test_served_and_the_ledger_show_the_scope(adopted: Path) -> None:
    r = frank("served", "-c", str(adopted))
    assert r.returncode == 0, r.stderr
    assert f"       adopted for: concurrency 1 (one request at a time); note: {NOTE}" in r.stdout
    with open_campaign(adopted) as c:
        [step] = c.store.ledger_steps()
        assert step.scope["adopted_for"] == {"concurrency": 1, "note": NOTE}
        assert served_scope(c.store.ledger_steps()) == (1, [step])


def test_the_front_holds_the_scope_in_front_of_an_engine_double(adopted: Path) -> None:
    """The admission alone, fast, in front of the test double of test_serve.py (no engine): refuse mode
    answers 429 while a request holds the one place, and the place is free again once it is answered."""
    srv = EngineTestDouble(tok())
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    opts = ServeOptions(
        campaign=adopted, upstream=srv.url, tokenizer=TOKENIZER, listen="127.0.0.1:0", over_scope="refuse"
    )
    try:
        with serving(opts, echo=lambda s: None) as front:
            first = held_request(front.url, "/echo")
            until(lambda: status(front.url)["running"] == 1)
            second = httpx.post(front.url + "/echo", content=b"{}", trust_env=False, timeout=30)
            assert second.status_code == 429 and second.json()["error"]["type"] == "over_scope"
            assert b'"echo"' in finish(first)
            until(lambda: status(front.url)["running"] == 0)
            assert httpx.post(front.url + "/echo", content=b"{}", trust_env=False, timeout=30).status_code == 200
            assert status(front.url)["refused"] == 1
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.engine
def test_frank_serve_refuses_a_second_simultaneous_request(adopted: Path, tmp_path: Path) -> None:
    """--over-scope refuse: the real CLI, the real engine, two real clients at once: the second gets 429
    naming the scope; once the first is answered, the next one is served."""
    proc = start_cli("-c", str(adopted), "--listen", "127.0.0.1:0", "--over-scope", "refuse", cwd=tmp_path)
    try:
        url, _ = wait_listening(proc)
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(2)]
        said = next((x for x in lines if x.startswith("frank serve: the served recipe is adopted")), lines)
        assert said.strip() == (
            "frank serve: the served recipe is adopted for concurrency 1 (ledger step 1 (draft)): at most 1 "
            "generation request(s) at once reach the engine; one more is refused with 429 (--over-scope refuse)"
        )
        first = held_request(url)
        until(lambda: status(url)["running"] == 1)  # the first client holds its place
        second = httpx.post(url + "/v1/chat/completions", content=CHAT, trust_env=False, timeout=60)
        assert second.status_code == 429
        assert "adopted for concurrency 1" in second.json()["error"]["message"]
        answer = finish(first)
        assert answer.startswith(b"HTTP/1.1 200") and b"choices" in answer
        third = httpx.post(url + "/v1/chat/completions", content=CHAT, trust_env=False, timeout=60)
        assert third.status_code == 200 and third.json()["choices"]
        counted = httpx.post(url + "/count", json={"content": "hi"}, trust_env=False, timeout=30)
        assert counted.status_code == 200  # counts are not generation: never held
        assert status(url) == {"limit": 1, "mode": "refuse", "running": 0, "waiting": 0, "refused": 1}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.communicate(timeout=60)


@pytest.mark.engine
def test_frank_serve_queues_a_second_simultaneous_request(adopted: Path) -> None:
    """The default, --over-scope queue: the second client waits (the front says so) until the first is
    answered, then is served."""
    lines: list[str] = []
    with serving(ServeOptions(campaign=adopted, listen="127.0.0.1:0"), echo=lines.append) as front:
        assert any(line.endswith("one more waits for a free place (--over-scope queue)") for line in lines)
        assert lines[-4:-2] == [
            f"frank serve: draft (ledger step 1) is adopted for concurrency 1 (one request at a time); note: {NOTE}",
            "frank serve: of these, concurrency is held here; a prompt longer than the context is kept as an "
            "observation outside scope (counted with the cache); the others are the adopters' words",
        ]
        assert lines[-2].startswith("frank serve: serving base + draft, frozen at ledger step 1 (adopt draft")
        assert lines[-1].startswith("frank serve: access log ")  # tests/test_serve_access.py reads it
        first = held_request(front.url)
        with ThreadPoolExecutor(1) as pool:
            second = pool.submit(
                httpx.post, front.url + "/v1/chat/completions", content=CHAT, trust_env=False, timeout=120
            )
            until(lambda: status(front.url)["waiting"] == 1)  # the front says it queued the second
            assert not second.done()
            assert finish(first).startswith(b"HTTP/1.1 200")
            assert second.result().status_code == 200
        assert status(front.url) == {"limit": 1, "mode": "queue", "running": 0, "waiting": 0, "refused": 0}


def test_the_held_concurrency_follows_the_served_parts(adopted: Path) -> None:
    """The smallest concurrency of the parts served now: another part adopted for 4 keeps 1; reverting the
    parts lifts their scope; a revert of a revert brings it back."""
    with open_campaign(adopted) as c:
        ledger.revert(c, why="draft off")
        assert served_scope(c.store.ledger_steps()) == (None, [])  # nothing adopted for a scope is served
        ledger.revert(c, why="draft back")
        assert served_scope(c.store.ledger_steps())[0] == 1
        reg = stored_design(c, name="threads", parts='["threads1"]', served=CONFIRMED[0], candidate=CONFIRMED[1])
        ledger.adopt(c, "threads1", reg.design_id, scope=parse_scope(["concurrency=4"]))
        limit, steps = served_scope(c.store.ledger_steps())
        assert (limit, [e.part for e in steps]) == (1, ["draft"])
        ledger.revert(c, why="threads1 off")
        ledger.revert(c, why="threads1 back")  # re-applies step 2: both served again
        assert served_scope(c.store.ledger_steps())[0] == 1
        ledger.revert(c, why="threads1 off again")
        assert served_scope(c.store.ledger_steps())[0] == 1  # draft (concurrency 1) is still served
    with open_campaign(adopted) as c:
        assert [e.part for e in served_adoptions(c.store.ledger_steps())] == ["draft"]


def test_a_prompt_longer_than_the_adopted_context_is_kept_as_outside_scope(tmp_path: Path) -> None:
    """Adopted for a context of 8 tokens: a longer prompt is still served (the scope is not a gate) but kept as
    an observation outside scope, and the note says so under the step; a short one is within it."""
    camp = make_campaign(tmp_path / "c")
    make_workload(camp.root / "workloads" / "w.jsonl")
    reg = stored_design(camp, name="draft-speed", served=CONFIRMED[0], candidate=CONFIRMED[1])
    ledger.adopt(camp, "draft", reg.design_id, scope=parse_scope(["context=8"]))
    camp.close()
    srv = EngineTestDouble(tok())
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    long_prompt = "def f(x):\n    return x  # a prompt of more than eight tokens\n"
    want = len(tok().encode(long_prompt, add_special_tokens=True).ids)
    lines: list[str] = []
    try:
        opts = ServeOptions(campaign=tmp_path / "c", upstream=srv.url, tokenizer=TOKENIZER, listen="127.0.0.1:0")
        with serving(opts, echo=lines.append) as front:
            for prompt in ("hi", long_prompt):
                r = httpx.post(front.url + "/completion", json={"prompt": prompt}, trust_env=False, timeout=30)
                assert r.status_code == 200
    finally:
        srv.shutdown()
        srv.server_close()
    assert "frank serve: draft (ledger step 1) is adopted for context 8 tokens" in lines
    with open_campaign(tmp_path / "c") as c:
        assert [r.outside_scope for r in c.store.served_requests()] == [None, f"context {want} > 8 tokens"]
        text = write_report(c, tmp_path / "out").read_text()
    assert f"Outside the adopted scope: 1 request(s) served under step 1 (first: context {want} > 8 tokens)." in text


@pytest.mark.parametrize("mode", ["queue", "refuse"])
def test_admission_never_lets_more_than_its_limit_through_and_counts_every_request(mode: str) -> None:
    """32 threads entering 50 times each at a limit of 2: at no moment are more than 2 inside; queued ones all get
    in, refused ones are counted; the counts end at zero running and waiting; a leave without an enter is refused."""
    admission = Admission(2, "queue" if mode == "queue" else "refuse", "adopted for concurrency 2")
    inside, most, lock, got = [0], [0], threading.Lock(), [0]

    def worker() -> None:
        for _ in range(50):
            if not admission.enter():
                continue
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
                got[0] += 1
            time.sleep(0)
            with lock:
                inside[0] -= 1
            admission.leave()

    with ThreadPoolExecutor(32) as pool:
        for f in [pool.submit(worker) for _ in range(32)]:
            f.result()
    counts = admission.counts()
    assert most[0] <= 2 and counts["running"] == 0 and counts["waiting"] == 0
    assert got[0] + counts["refused"] == 32 * 50 and (mode == "refuse" or counts["refused"] == 0)
    with pytest.raises(ValueError):
        admission.leave()
    if mode == "refuse":  # both places held: the next is refused at once and counted
        refused = counts["refused"]
        assert admission.enter() and admission.enter() and not admission.enter()
        assert admission.counts()["refused"] == refused + 1 and admission.counts()["running"] == 2
