"""Observations after adoption: ``frank serve`` keeps per-request timings of the traffic it serves,
tagged with the ledger step served, and ``frank report`` sets them side by side per step, labelled as
observational (different occasions, not a controlled comparison), never as a verdict.

The real CLI serves real traffic (token counts, generations, a bad request the front refuses, a
chat with an image the real llama-server fails with a 500) through the tiny llama-server before and
after a ``threads1`` adoption, then writes the note; ``frank serve --upstream URL --campaign DIR``
keeps observations of an engine it did not start, tagged with the campaign's served step."""

from __future__ import annotations

import os
import re
import shutil
import signal
from pathlib import Path

import httpx
import pytest
from conftest import frank
from test_serve import start_cli, wait_listening

from frankenstein import ledger
from frankenstein.campaign import open_campaign
from frankenstein.config import ResolvedRecipe
from frankenstein.engines import start_engine
from frankenstein.engines.process import free_port
from frankenstein.shipped import data_path
from frankenstein.regioncache.observe import ServedLog, route_of

from helpers_campaign import make_campaign, make_workload
from helpers_ledger import CONFIRMED, stored_design


class Ms:
    """Equal to a median printed in milliseconds above zero (its value is the machine's, not the test's)."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and bool(re.fullmatch(r"[0-9.]+(e[+-]?[0-9]+)?", other)) and float(other) > 0

    def __repr__(self) -> str:
        return "<ms>"


ANY = Ms()


def serve_traffic(camp: Path, cwd: Path, counts: int, chats: int) -> None:
    """``frank serve`` on the campaign: ``counts`` /count, ``chats`` chat completions, one 400 from the
    front (a count of a number), one engine error (a chat with an image: the tiny model has no
    projector and llama-server answers 500, relayed by the front), then SIGTERM."""
    proc = start_cli("-c", str(camp), "--listen", f"127.0.0.1:{free_port()}", cwd=cwd)
    try:
        url, _ = wait_listening(proc)
        with httpx.Client(base_url=url, trust_env=False, timeout=120) as c:
            for i in range(counts):
                assert c.post("/count", json={"content": f"def f{i}(x):\n    return x\n" * (i + 1)}).status_code == 200
            for _ in range(chats):
                chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
                assert c.post("/v1/chat/completions", json=chat).status_code == 200
            assert c.post("/count", json={"content": 7}).status_code == 400  # a careless client
            image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
            failed = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": [image]}]})
            assert failed.status_code == 500, failed.text  # llama-server's own answer, relayed
            assert "image input is not supported" in failed.json()["error"]["message"]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err


@pytest.mark.engine
def test_serve_across_an_adopt_step_gives_an_observational_section(tmp_path: Path, llama_server_bin: str) -> None:
    camp = make_campaign(tmp_path / "c")
    make_workload(camp.root / "workloads" / "w.jsonl")
    serve_traffic(camp.root, tmp_path, counts=5, chats=2)  # the base recipe, before any step
    reg = stored_design(camp, name="b256", served=CONFIRMED[0], candidate=CONFIRMED[1], parts='["threads1"]')
    step = ledger.adopt(camp, "threads1", reg.design_id)
    camp.close()
    serve_traffic(camp.root, tmp_path, counts=3, chats=1)  # the served recipe is now base + threads1

    r = frank("report", "-c", str(camp.root), "--out", str(tmp_path / "note"))
    assert r.returncode == 0, r.stderr
    note = (tmp_path / "note" / "note.md").read_text()
    section = note[note.index("## Observations after adoption (observational)") :]
    assert "different occasions, not a controlled comparison" in section
    assert "is not evidence that a step changed anything" in section  # never a verdict
    assert f"### Step {step.seq}: adopt `threads1`, design `{reg.design_id}`" in section
    assert "Before: served under the base recipe (before any step); after: served under step 1." in section
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in section.splitlines()
        if line.startswith("| ")
    }
    # route | before: requests, median ms, error status, engine errors | after: the same
    count, chat = rows["count"], rows["chat"]
    assert (count[0], count[2], count[3]) == ("6", "1", "0") and (count[4], count[6], count[7]) == ("4", "1", "0")
    # chat: 2 + 1 with an image before, 1 + 1 after; the image one is an error status and an engine error
    assert (chat[0], chat[2], chat[3]) == ("3", "1", "1") and (chat[4], chat[6], chat[7]) == ("2", "1", "1")
    for median_ms in (count[1], count[5], chat[1], chat[5]):
        assert re.fullmatch(r"[0-9.]+(e[+-]?[0-9]+)?", median_ms) and float(median_ms) > 0
    for word in ("confirmed", "faster", "slower", "improv"):
        assert word not in section.lower()


def test_engine_errors_and_routes_are_kept(tmp_path: Path) -> None:
    """A request the engine never answered counts as an engine error; paths map to routes."""
    from frankenstein.campaign import init_campaign
    from frankenstein.regioncache.cache import RegionCache, load_tokenizer
    from frankenstein.regioncache.proxy import start_front
    from frankenstein.shipped import data_path

    camp = init_campaign(tmp_path / "c")
    log = ServedLog(camp.store, step=None, flush_s=60)
    cache = RegionCache(load_tokenizer(data_path("tiny-tokenizer.json")))
    with start_front(f"http://127.0.0.1:{free_port()}", cache, observe=log) as front:  # nothing listens there
        assert httpx.post(front.url + "/v1/completions", json={"prompt": "x"}, trust_env=False).status_code == 502
        assert httpx.post(front.url + "/tokenize", json={"content": "x"}, trust_env=False).status_code == 200
        assert httpx.get(front.url + "/frank/status", trust_env=False).status_code == 200  # frank's own: not kept
    log.close()  # writes what the (slow) writer had not written yet
    got = [(r.route, r.status, r.engine_error) for r in camp.store.served_requests()]
    assert got == [("completions", 502, True), ("tokenize", 200, False)]
    assert [route_of(p) for p in ("/v1/messages/count_tokens/", "/v1/chat/completions?x=1", "/health")] == [
        "count_tokens",
        "chat",
        "other",
    ]
    camp.close()


@pytest.mark.engine
def test_upstream_with_a_campaign_keeps_observations_of_its_served_step(
    tmp_path: Path, tiny_recipe: ResolvedRecipe
) -> None:
    """An engine started outside frank, fronted with ``--upstream`` and ``--campaign``: its traffic is
    kept, tagged with the campaign's last ledger step; an engine serving another model file is refused
    (its traffic would be filed under a step it does not serve)."""
    camp = make_campaign(tmp_path / "c")
    make_workload(camp.root / "workloads" / "w.jsonl")
    reg = stored_design(camp, name="b256", served=CONFIRMED[0], candidate=CONFIRMED[1], parts='["threads1"]')
    step = ledger.adopt(camp, "threads1", reg.design_id)
    camp.close()
    with start_engine(tiny_recipe, tmp_path / "logs") as eng:
        proc = start_cli(
            "--upstream", eng.base_url, "-c", str(camp.root), "--listen", f"127.0.0.1:{free_port()}", cwd=tmp_path
        )
        try:
            url, engine = wait_listening(proc)
            assert engine == eng.base_url and proc.stdout is not None
            assert proc.stdout.readline().startswith("region cache: on (")
            assert proc.stdout.readline() == (
                f"frank serve: observations kept in {camp.root}, tagged with ledger step {step.seq} "
                "(the --upstream engine serves it)\n"
            )
            with httpx.Client(base_url=url, trust_env=False, timeout=120) as c:
                for i in range(3):
                    assert c.post("/count", json={"content": "x" * (i + 1)}).status_code == 200
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
    with open_campaign(camp.root) as reopened:
        got = [(r.step, r.route, r.status) for r in reopened.store.served_requests()]
    assert got == [(step.seq, "count", 200)] * 3

    other = tmp_path / "elsewhere" / "tiny-target.gguf"  # the same bytes, another model file
    other.parent.mkdir()
    shutil.copy(data_path("tiny-target.gguf"), other)
    elsewhere = tiny_recipe.model_copy(update={"model": str(other)})
    with start_engine(elsewhere, tmp_path / "logs2") as eng:
        r = frank("serve", "--upstream", eng.base_url, "-c", str(camp.root), "--listen", f"127.0.0.1:{free_port()}")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip() == (
        f"frank: error: --campaign: the engine at --upstream serves {other}, not the served recipe's model "
        f"{data_path('tiny-target.gguf')}; its traffic cannot be observed under this campaign's ledger step "
        "(leave out --campaign)"
    )


def serve_unanswered(camp, step: int | None, tokenized: int, failed: int) -> None:
    """Real served rows without an engine: the real front and ServedLog (what ``frank serve`` runs) in front
    of a port where nothing listens, tagged with ``step``: ``tokenized`` /tokenize the front answers itself
    (200), ``failed`` completions the engine never answers (502, engine errors)."""
    from frankenstein.regioncache.cache import RegionCache, load_tokenizer
    from frankenstein.regioncache.proxy import start_front

    log = ServedLog(camp.store, step=step, flush_s=60)
    cache = RegionCache(load_tokenizer(data_path("tiny-tokenizer.json")))
    with start_front(f"http://127.0.0.1:{free_port()}", cache, observe=log) as front:
        with httpx.Client(base_url=front.url, trust_env=False, timeout=60) as c:
            for i in range(tokenized):
                assert c.post("/tokenize", json={"content": "x" * (i + 1)}).status_code == 200
            for _ in range(failed):
                assert c.post("/v1/completions", json={"prompt": "x"}).status_code == 502
    log.close()


def observed_rows(note: str) -> dict[str, dict[str, list[str]]]:
    """{step heading: {route: cells}} of the observational section."""
    section = note[note.index("## Observations after adoption (observational)") :]
    out: dict[str, dict[str, list[str]]] = {}
    head = ""
    for line in section.splitlines():
        if line.startswith("### "):
            head = line[4:].split(":", 1)[0]
            out[head] = {}
        elif line.startswith("| ") and head and not line.startswith(("| route", "| ---", "|---")):
            cells = [c.strip() for c in line.split("|")[1:-1]]
            out[head][cells[0]] = cells[1:]
    return out


def test_since_keeps_the_steps_at_or_after_it_with_their_whole_before_side(tmp_path: Path) -> None:
    """``--since`` keeps the ledger steps at or after it, as for the rest of the note; a kept step's before
    side is all the traffic of the step it replaced, though that step came before ``since``."""
    from frankenstein.report import write_report

    camp = make_campaign(tmp_path / "c")
    make_workload(camp.root / "workloads" / "w.jsonl")
    serve_unanswered(camp, None, tokenized=4, failed=1)  # the base recipe
    reg = stored_design(camp, name="b256", served=CONFIRMED[0], candidate=CONFIRMED[1], parts='["threads1"]')
    first = ledger.adopt(camp, "threads1", reg.design_id)
    serve_unanswered(camp, first.seq, tokenized=3, failed=2)
    second = ledger.revert(camp, why="no evidence on our workload")
    serve_unanswered(camp, second.seq, tokenized=1, failed=1)
    assert first.at < second.at

    every = write_report(camp, tmp_path / "all").read_text()
    assert "(12 in all)" in every
    assert observed_rows(every) == {
        "Step 1": {
            "completions": ["1", ANY, "1", "1", "2", ANY, "2", "2"],
            "tokenize": ["4", ANY, "0", "0", "3", ANY, "0", "0"],
        },
        "Step 2": {
            "completions": ["2", ANY, "2", "2", "1", ANY, "1", "1"],
            "tokenize": ["3", ANY, "0", "0", "1", ANY, "0", "0"],
        },
    }

    since = write_report(camp, tmp_path / "since", since=second.at).read_text()
    section = since[since.index("## Observations after adoption (observational)") :]
    assert f"(7 in all, on the two sides of the ledger steps at or after {second.at})" in section
    assert "### Step 1" not in section  # before since: no section of its own
    assert "Before: served under step 1; after: served under step 2." in section  # step 1's traffic, whole
    assert observed_rows(since) == {"Step 2": observed_rows(every)["Step 2"]}
    assert "different occasions, not a controlled comparison" in section
    camp.close()

    later = frank("report", "-c", str(camp.root), "--out", str(tmp_path / "later"), "--since", "2999-01-01")
    assert later.returncode == 0, later.stderr
    assert "Observations after adoption" not in (tmp_path / "later" / "note.md").read_text()  # no step since then
    today = frank("report", "-c", str(camp.root), "--out", str(tmp_path / "today"), "--since", first.at[:10])
    assert today.returncode == 0, today.stderr
    assert observed_rows((tmp_path / "today" / "note.md").read_text()) == observed_rows(every)


def test_since_without_a_ledger_step_counts_the_base_traffic_since_then(tmp_path: Path) -> None:
    from frankenstein.report import write_report

    camp = make_campaign(tmp_path / "c")
    serve_unanswered(camp, None, tokenized=2, failed=1)
    note = write_report(camp, tmp_path / "all").read_text()
    assert "No ledger step yet: 3 request(s) served under the base recipe, nothing to set them beside." in note
    assert "Observations after adoption" not in write_report(camp, tmp_path / "later", since="2999-01-01").read_text()
    camp.close()
