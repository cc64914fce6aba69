"""Bad input an unlucky user gives (issue #16): one clear line naming the file and field, exit 1 (usage
errors exit 2), never a traceback, never a silent acceptance of a design that cannot finish. Every
refused registration is stored as a refusal (the one write a refused command makes)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from frankenstein.campaign import Campaign, open_campaign
from frankenstein.config import load_config
from frankenstein.design.registry import register
from frankenstein.errors import ConfigError, DesignError

from conftest import frank
from helpers_campaign import make_campaign

BASE = """\
name = "d"
blocks = 6
workload = "pkg:demo-workload.jsonl"
{extra}
[arms.served]
recipe = "served"
[arms.candidate]
recipe = "served"
parts = ["{part}"]
[rule]
kind = "sign"
"""

REFUSED = [
    ("replay = {{ temperature = nan }}", "draft", "replay.temperature"),
    ("replay = {{ temperature = -1.0 }}", "draft", "replay.temperature"),
    ("replay = {{ warmup_turns = 3, max_turns = 3 }}", "draft", "replay.warmup_turns"),
    ("replay = {{ warmup_turns = 5, max_turns = 2 }}", "draft", "replay.warmup_turns"),
    ("replay = {{ request_timeout_s = -1 }}", "draft", "replay.request_timeout_s"),
    ("replay = {{ request_timeout_s = 0 }}", "draft", "replay.request_timeout_s"),
    ("replay = {{ request_timeout_s = inf }}", "draft", "replay.request_timeout_s"),
    ("replay = {{ prefill_timeout_s = 0 }}", "draft", "replay.prefill_timeout_s"),
    ("replay = {{ timeout_per_token_s = nan }}", "draft", "replay.timeout_per_token_s"),
    ("starts_per_arm = 100000000", "draft", "starts_per_arm"),
    ("starts_per_arm = 101", "draft", "starts_per_arm"),
    ("agent = {{ temperature = inf }}", "draft", "agent.temperature"),
    ("", "gone", "arms.candidate"),  # the part's model file does not exist
    ("", "nosuchpart", "arms.candidate"),  # an unknown part names the design file too
]
TOML_EXTRA = """
[parts.gone]
model = "models/missing.gguf"
"""


@pytest.fixture
def campaign(tmp_path: Path) -> Iterator[Campaign]:
    c = make_campaign(tmp_path / "c")
    (c.root / "frank.toml").write_text((c.root / "frank.toml").read_text() + TOML_EXTRA)
    c.close()
    with open_campaign(tmp_path / "c") as opened:
        yield opened


@pytest.mark.parametrize(("extra", "part", "field"), REFUSED, ids=[r[2] + ":" + (r[0] or r[1]) for r in REFUSED])
def test_registration_refuses_a_design_that_cannot_finish(
    campaign: Campaign, extra: str, part: str, field: str
) -> None:
    path = campaign.root / "designs" / "d.toml"
    path.write_text(BASE.format(extra=extra.replace("{{", "{").replace("}}", "}"), part=part))
    with pytest.raises(DesignError) as err:
        register(campaign, path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: {field}") and "\n" not in msg, msg
    refusals = campaign.store.refusals()
    assert [r.reason for r in refusals] == [msg]  # stored: the note lists it
    assert campaign.store.registry_rows() == []


def test_the_documented_bounds(campaign: Campaign) -> None:
    """blocks at most 1000, starts_per_arm at most 100; a registration at the bounds is accepted at once."""
    path = campaign.root / "designs" / "d.toml"
    path.write_text(BASE.format(extra="", part="draft").replace("blocks = 6", "blocks = 1000000000"))
    with pytest.raises(DesignError, match="blocks: Input should be less than or equal to 1000"):
        register(campaign, path)
    path.write_text(BASE.format(extra="starts_per_arm = 100", part="draft").replace("blocks = 6", "blocks = 1000"))
    reg = register(campaign, path)
    assert len(reg.schedule) == 1000 and len(reg.schedule[0]) == 200


def test_a_bad_start_timeout_in_frank_toml(tmp_path: Path) -> None:
    for value in ("0", "-5", "inf", "nan"):
        root = tmp_path / value
        root.mkdir()
        (root / "frank.toml").write_text(f'[recipes.base]\nmodel = "pkg:tiny-target.gguf"\nstart_timeout_s = {value}\n')
        with pytest.raises(ConfigError, match="frank.toml: recipes.base.start_timeout_s: "):
            load_config(root / "frank.toml")


def test_listen_port_out_of_range_is_a_usage_error(tmp_path: Path) -> None:
    for args in (
        ["record", "--upstream", "http://127.0.0.1:9", "--out", str(tmp_path / "t.jsonl")],
        ["serve", "-c", str(tmp_path), "--upstream", "http://127.0.0.1:9"],
    ):
        for listen in ("127.0.0.1:99999", "127.0.0.1:-1", "127.0.0.1:http"):
            run = frank(*args, "--listen", listen, timeout=60)
            assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
            assert "--listen" in run.stderr and listen in run.stderr
    assert not (tmp_path / "t.jsonl").exists()


def test_init_over_an_existing_file_refuses_and_keeps_it(tmp_path: Path) -> None:
    target = tmp_path / "notes.txt"
    target.write_text("mine")
    run = frank("init", str(target))
    assert (
        run.returncode == 1
        and run.stderr.strip() == f"frank: error: {target}: exists and is not a folder; refusing to overwrite it"
    )
    assert target.read_text() == "mine"
    root = tmp_path / "c"
    assert frank("init", str(root)).returncode == 0
    (root / "frank.toml").write_text((root / "frank.toml").read_text() + "# my edit\n")
    assert frank("init", str(root)).returncode == 0
    assert (root / "frank.toml").read_text().endswith("# my edit\n")  # an existing frank.toml is kept


def test_a_refused_registration_on_the_cli(tmp_path: Path) -> None:
    root = tmp_path / "c"
    assert frank("init", str(root)).returncode == 0
    path = root / "designs" / "d.toml"
    path.write_text(BASE.format(extra="replay = { temperature = nan }", part="draft"))
    run = frank("register", str(path), "-c", str(root))
    assert run.returncode == 1
    assert run.stderr.strip() == f"frank: error: {path}: replay.temperature: must be a finite number >= 0, got nan"


def test_replay_accepts_a_shipped_pkg_workload(tmp_path: Path, llama_server_bin: str) -> None:
    """``frank replay`` takes ``pkg:NAME`` like a design's ``workload`` does (one real tiny start)."""
    root = tmp_path / "c"
    assert frank("init", str(root)).returncode == 0
    run = frank("replay", "base", "pkg:demo-workload.jsonl", "-c", str(root), "--max-turns", "2", timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("start 1: ok")


def test_a_bad_lock_wait_in_the_environment_is_named(tmp_path: Path) -> None:
    make_campaign(tmp_path / "c")
    for name in ("FRANK_DB_BUSY_TIMEOUT_S", "FRANK_DB_LOCK_WAIT_S"):
        for value in ("abc", "nan", "-1", "inf"):
            run = frank("served", "-c", str(tmp_path / "c"), env={name: value}, timeout=60)
            assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
            assert (
                run.stderr.strip()
                == f"frank: error: environment variable {name}={value!r}: expected a finite number of seconds >= 0"
            )


def test_an_unknown_served_recipe_names_frank_toml_and_the_field(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    toml = c.root / "frank.toml"
    text = toml.read_text()
    toml.write_text(text.replace('served = "base"', 'served = "nope"', 1))
    assert 'served = "nope"' in toml.read_text()
    run = frank("served", "-c", str(c.root), timeout=60)
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    assert str(toml) in run.stderr and "served" in run.stderr and "unknown recipe 'nope'" in run.stderr, run.stderr


def test_pkg_paths_stay_inside_the_package_data(tmp_path: Path) -> None:
    outside = tmp_path / "outside.jsonl"
    outside.write_text("{}\n")
    for name in ("../../../../../../../../etc/passwd", f"../../../../../../../..{outside}", "", "."):
        run = frank("workload", "stats", f"pkg:{name}", timeout=60)
        assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
        assert "names no file inside the package's data folder" in run.stderr, run.stderr
    assert frank("workload", "stats", "pkg:demo-workload.jsonl", timeout=60).returncode == 0


def test_plan_refuses_numbers_it_cannot_use() -> None:
    for args in (
        ["--effect", "nan"],
        ["--effect", "0.05", "--sd", "inf"],
        ["--effect", "0.05", "--simulations", "1000000000"],
    ):
        run = frank("plan", "--direction", "lower", "--sd", "0.1", *args, timeout=60)
        assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
