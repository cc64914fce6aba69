"""A server frank did not start: ``frank replay --url`` and the ``external`` engine of designs.

One llama-server per module, started here as a plain subprocess (not through frank), replays the
shipped demo workload's recorded chat turns through the real CLI; per-turn rows (with ``pre_ms`` and
``post_ms``) land in the store, the server outlives every frank command, registration refuses an
external arm unless the design says its starts need not be fresh, and a design with ``pre_ms`` as its
primary metric registers, runs and analyzes, its facts saying the starts were not fresh."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import BASE_ARGS, frank

from frankenstein.campaign import init_campaign, open_campaign
from frankenstein.shipped import data_path
from tls_relay import llama_server

pytestmark = pytest.mark.engine

WORKLOAD = str(data_path("demo-workload.jsonl"))


def toml(url: str) -> str:
    return f"""\
name = "ext"
served = "base"

[recipes.base]
engine = "llamacpp"
model = "pkg:tiny-target.gguf"
args = {BASE_ARGS!r}
start_timeout_s = 120

[parts.ngram]
args = ["--spec-type", "ngram-simple"]
env = {{ LLAMA_ARG_THREADS = "1" }}

[recipes.drafted]
engine = "llamacpp"
model = "pkg:tiny-target.gguf"
args = {BASE_ARGS!r}
parts = ["ngram"]

[recipes.running]
engine = "external"
args = ["--url", "{url}"]
start_timeout_s = 30

[recipes.gone]
engine = "external"
args = ["--url", "http://127.0.0.1:9"]
start_timeout_s = 1
""".replace("'", '"')


@pytest.fixture(scope="module")
def server(llama_server_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama-server on the tiny target, started by the test (never by frank), killed at the end."""
    with llama_server(llama_server_bin, tmp_path_factory.mktemp("ext") / "llama.log") as url:
        yield url


@pytest.fixture(scope="module")
def camp(server: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("camp") / "c"
    init_campaign(root, toml=toml(server)).close()
    return root


def test_replay_url_against_a_server_started_outside_frank(camp: Path, server: str) -> None:
    r = frank("replay", "base", WORKLOAD, "-c", str(camp), "--url", server, "--max-turns", "4")
    assert r.returncode == 0, r.stderr + r.stdout
    assert "start 1: ok" in r.stdout
    pre = next(line for line in r.stdout.splitlines() if line.strip().startswith("pre_ms"))
    assert pre.split()[1] != "-"  # printed per start, from the server's prompt time and the client's TTFT
    # the peer-shaped percentile table of the start's measured turns (3: the first of 4 is a warm-up)
    table = {tuple(ln.split()[:3]) for ln in r.stdout.splitlines() if ln.startswith("  base ")}
    for metric in ("ttft_ms", "tpot_ms", "e2e_ms", "pre_ms", "post_ms"):
        assert ("base", metric, "3") in table, r.stdout
    assert any(m == "itl_ms" and int(n) >= 3 for _, m, n in table), r.stdout  # one per chunk gap
    with open_campaign(camp) as c:
        row = c.store.query("SELECT * FROM starts WHERE id = 1")[0]
        assert row["engine"] == "external" and "not started by frank" in row["engine_version"]
        turns = c.store.turns_of(1)
    assert len(turns) == 4 and [t["warmup"] for t in turns] == [1, 0, 0, 0]
    for t in turns:
        assert t["prompt_ms"] is not None and t["decode_ms"] is not None  # llama.cpp timings, read through --url
        assert t["pre_ms"] == pytest.approx(t["ttft_ms"] - t["prompt_ms"])
        assert t["post_ms"] == pytest.approx(t["e2e_ms"] - t["ttft_ms"] - t["decode_ms"])
        assert t["pre_ms"] > 0  # the client's TTFT includes the server's prompt time and more
    # frank never stopped it: the server still answers
    assert httpx.get(server + "/health", timeout=5, trust_env=False).status_code == 200


def test_url_replay_records_no_part_it_did_not_apply(camp: Path, server: str) -> None:
    """A careless user points a recipe with a part at a server frank did not start: the part cannot have
    been applied, so the start must not claim it; --part with --url is refused before anything runs."""
    with open_campaign(camp) as c:
        before = c.store.query("SELECT COUNT(*) AS n FROM starts")[0]["n"]
    r = frank("replay", "base", WORKLOAD, "-c", str(camp), "--url", server, "--part", "ngram")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "--part" in r.stderr and "did not start" in r.stderr
    with open_campaign(camp) as c:
        assert c.store.query("SELECT COUNT(*) AS n FROM starts")[0]["n"] == before  # nothing ran
    r = frank("replay", "drafted", WORKLOAD, "-c", str(camp), "--url", server, "--max-turns", "2")
    assert r.returncode == 0, r.stderr + r.stdout
    assert "part ngram" in r.stderr and "env LLAMA_ARG_THREADS" in r.stderr and "recorded without them" in r.stderr
    start_id = int(r.stdout.split()[1].rstrip(":"))
    with open_campaign(camp) as c:
        row = c.store.query("SELECT * FROM starts WHERE id = ?", (start_id,))[0]
    recipe = json.loads(row["recipe"]) if isinstance(row["recipe"], str) else row["recipe"]
    assert recipe["name"] == "drafted" and recipe["engine"] == "external"
    assert recipe["parts"] == [] and recipe["env"] == {} and recipe["args"] == ["--url", server]


def test_bad_and_dead_urls_say_what_is_wrong(camp: Path) -> None:
    r = frank("replay", "base", WORKLOAD, "-c", str(camp), "--url", "https://127.0.0.1:1/v1")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "--url" in r.stderr and "http://HOST:PORT" in r.stderr
    r = frank("replay", "gone", WORKLOAD, "-c", str(camp), "--max-turns", "2")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "failed (the external server at http://127.0.0.1:9 did not answer ready within 1 s" in r.stdout


DESIGN = """\
name = "pre"
kind = "speed"
hypothesis = "a fresh llama-server spends less time outside its own timings than the running one"
blocks = 2
workload = "{workload}"
primary_metric = "pre_ms"
secondary = ["post_ms", "ttft_ms"]

[arms.served]
recipe = "served"

[arms.candidate]
recipe = "running"

[rule]
kind = "sign"
alpha = 0.5

[replay]
warmup_turns = 1
max_turns = 3
{fresh}
"""


def test_external_arm_needs_the_design_to_say_starts_are_not_fresh(camp: Path, tmp_path: Path) -> None:
    refused = tmp_path / "refused.toml"
    refused.write_text(DESIGN.format(workload=WORKLOAD, fresh=""))
    r = frank("register", str(refused), "-c", str(camp))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert str(refused) in r.stderr and "replay.fresh_starts" in r.stderr and "arm candidate" in r.stderr

    design = tmp_path / "pre.toml"
    design.write_text(DESIGN.format(workload=WORKLOAD, fresh="fresh_starts = false"))
    r = frank("register", str(design), "-c", str(camp))
    assert r.returncode == 0, r.stderr
    r = frank("run", "pre-1", "-c", str(camp), timeout=600)
    assert r.returncode == 0, r.stderr + r.stdout
    r = frank("analyze", "pre-1", "-c", str(camp))
    assert r.returncode == 0, r.stderr
    assert "primary metric: pre_ms" in r.stdout and "post_ms" in r.stdout

    from frankenstein.design.facts import design_facts, fresh_start_lines
    from frankenstein.design.kinds.base import Evidence
    from frankenstein.design.registry import get

    with open_campaign(camp) as c:
        facts = design_facts(c, Evidence.read(c, get(c, "pre-1")))
        candidate = [s for s in c.store.starts_of("pre-1") if s.arm == "candidate"]
    assert facts.not_fresh == ("candidate",)
    assert "Starts were not fresh: arm(s) candidate" in fresh_start_lines(facts)[0]
    assert all(s.ok and s.metrics["pre_ms"] > 0 for s in candidate)
    r = frank("report", "-c", str(camp), "-o", str(tmp_path / "note"))
    assert r.returncode == 0, r.stderr
    assert "Starts were not fresh: arm(s) candidate" in (tmp_path / "note" / "note.md").read_text()


def test_an_external_arm_cannot_claim_parts_it_never_applied(camp: Path, tmp_path: Path) -> None:
    """A gaming design: the candidate is the running server "plus" a part. Both arms would hit servers that
    never got the part, and the records would say it was applied; registration refuses it, naming the field."""
    design = tmp_path / "claims.toml"
    text = DESIGN.format(workload=WORKLOAD, fresh="fresh_starts = false")
    design.write_text(text.replace('recipe = "running"\n', 'recipe = "running"\nparts = ["ngram"]\n'))
    r = frank("register", str(design), "-c", str(camp))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"frank: error: {design}: arms.candidate.parts: recipe 'running+ngram' is a server")
    assert "cannot be applied" in r.stderr
    with open_campaign(camp) as c:
        assert all(row.name != "claims" for row in c.store.registry_rows())


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ('model = "pkg:tiny-target.gguf"\n', "model: an external recipe names a server frank does not start"),
        ('parts = ["ngram"]\n', "parts: an external recipe names a server frank does not start"),
        ('env = { LLAMA_ARG_UBATCH = "8" }\n', "env: an external recipe"),
    ],
)
def test_an_external_recipe_with_launch_fields_is_refused_naming_the_file(
    tmp_path: Path, server: str, extra: str, says: str
) -> None:
    root = tmp_path / "c"
    root.mkdir()
    (root / "frank.toml").write_text(
        toml(server).replace(
            '[recipes.running]\nengine = "external"\n', '[recipes.running]\nengine = "external"\n' + extra
        )
    )
    r = frank("replay", "running", WORKLOAD, "-c", str(root), "--max-turns", "2")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip().startswith(f"frank: error: {root / 'frank.toml'}: recipes.running: {says}"), r.stderr


def test_a_bad_external_url_is_refused_when_frank_toml_loads(tmp_path: Path, server: str) -> None:
    root = tmp_path / "c"
    root.mkdir()
    (root / "frank.toml").write_text(
        toml(server).replace(f'args = ["--url", "{server}"]', 'args = ["--url", "localhost:8080", "--x"]')
    )
    r = frank("verify", "-c", str(root))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert f"{root / 'frank.toml'}: recipes.running: args: an external recipe needs" in r.stderr


def test_the_start_records_the_model_the_server_says_it_serves(camp: Path, server: str) -> None:
    r = frank("replay", "base", WORKLOAD, "-c", str(camp), "--url", server, "--max-turns", "2")
    assert r.returncode == 0, r.stderr
    assert "model " in r.stderr and "tiny-target.gguf" in r.stderr  # named as not applied
    start_id = int(r.stdout.split()[1].rstrip(":"))
    with open_campaign(camp) as c:
        row = c.store.query("SELECT * FROM starts WHERE id = ?", (start_id,))[0]
    recipe = json.loads(row["recipe"])
    caps = json.loads(row["capabilities"])
    assert recipe["model"] == ""  # frank loaded nothing
    resources = json.loads(row["resources"])
    assert resources["caches"]["policy"] == "not applicable"  # no cache folder was given to that server
    assert "engine_env" not in resources  # nor was frank's environment
    assert caps["served_model"].endswith("tiny-target.gguf") and "serving " in row["engine_version"]


def test_a_cold_cache_design_with_an_external_arm_is_refused(camp: Path, tmp_path: Path) -> None:
    design = tmp_path / "cold.toml"
    text = DESIGN.format(workload=WORKLOAD, fresh="fresh_starts = false")
    design.write_text(text.replace('primary_metric = "pre_ms"', 'primary_metric = "pre_ms"\ncache = "cold"'))
    r = frank("register", str(design), "-c", str(camp))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"frank: error: {design}: cache: ") and "is given none" in r.stderr


def test_an_unknown_engine_is_named_before_anything_starts(tmp_path: Path, server: str) -> None:
    root = tmp_path / "c"
    root.mkdir()
    (root / "frank.toml").write_text(
        toml(server).replace('[recipes.base]\nengine = "llamacpp"', '[recipes.base]\nengine = "llamacp"')
    )
    r = frank("replay", "base", WORKLOAD, "-c", str(root), "--max-turns", "2")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"frank: error: {root / 'frank.toml'}: recipes.base.engine: unknown engine 'llamacp'"), (
        r.stderr
    )
    assert "begins" not in r.stderr  # nothing started
