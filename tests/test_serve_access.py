"""``frank serve`` says what it serves and keeps an access log (#32 item 5): on start the served recipe and
its ledger step; one line per request (time, path without its query string, status, ms) in a 0600 file
under the campaign's logs/, no bodies, no headers, no query strings. The real CLI, a real llama-server."""

from __future__ import annotations

import os
import re
import signal
import stat
from pathlib import Path

import httpx
import pytest

from frankenstein import ledger
from frankenstein.regioncache.observe import access_line

from helpers_campaign import make_campaign, make_workload
from helpers_ledger import CONFIRMED, stored_design
from test_serve import start_cli, wait_listening

SECRET = "sk-do-not-log-me"


def test_an_access_line_has_no_query_string() -> None:
    line = access_line(0.0, f"/v1/chat/completions?api_key={SECRET}#frag", 200, 12.345)
    assert line == "1970-01-01T00:00:00.000Z /v1/chat/completions 200 12.3 ms"


@pytest.mark.engine
def test_serve_names_its_recipe_and_step_and_logs_every_request(tmp_path: Path, llama_server_bin: str) -> None:
    camp = make_campaign(tmp_path / "c")
    make_workload(camp.root / "workloads" / "w.jsonl")
    reg = stored_design(camp, name="t1", served=CONFIRMED[0], candidate=CONFIRMED[1], parts='["threads1"]')
    step = ledger.adopt(camp, "threads1", reg.design_id)
    camp.close()
    proc = start_cli("-c", str(camp.root), "--listen", "127.0.0.1:0", cwd=tmp_path)
    try:
        url, _ = wait_listening(proc)
        assert proc.stdout is not None
        said = []
        while not said or not said[-1].startswith("frank serve: access log "):
            said.append(proc.stdout.readline().rstrip("\n"))
        assert (
            f"frank serve: serving base + threads1, frozen at ledger step {step.seq} (adopt threads1 on design {reg.design_id})"
            in said
        )
        log = Path(said[-1].split()[4])
        assert log.parent == camp.root / "logs" and log.name.startswith("serve-access-")
        with httpx.Client(base_url=url, trust_env=False, timeout=120) as c:
            assert c.post(f"/count?api_key={SECRET}", json={"content": SECRET}).status_code == 200
            chat = {"messages": [{"role": "user", "content": SECRET}], "max_tokens": 2}
            headers = {"Authorization": f"Bearer {SECRET}"}
            assert c.post("/v1/chat/completions", json=chat, headers=headers).status_code == 200
            assert c.get("/no/such/route").status_code == 404
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    lines = log.read_text().splitlines()
    assert [line.split()[1:3] for line in lines] == [
        ["/count", "200"],
        ["/v1/chat/completions", "200"],
        ["/no/such/route", "404"],
    ]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \S+ \d{3} \d+\.\d ms", line) for line in lines), (
        lines
    )
    assert SECRET not in log.read_text()
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
