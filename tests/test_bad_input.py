"""Bad input an unlucky user gives (issue #16): one clear line naming the file and field, exit 1 (usage
errors exit 2), never a traceback, never a silent acceptance of a design that cannot finish. Every
refused registration is stored as a refusal (the one write a refused command makes)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from frankenstein.campaign import Campaign, open_campaign
from frankenstein.config import load_config
from frankenstein.design.registry import register
from frankenstein.errors import ConfigError, DesignError
from frankenstein.shipped import data_path
from frankenstein.workload.trace import load_trace

from conftest import frank
from helpers_campaign import make_campaign, make_workload, write_design
from helpers_cli import cli

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


# ---------------------------------------------------------------- issue 30, item 7: inputs that could never run

LAUNCH_TOML = [  # (text added to a frank.toml with a base recipe, the field named, words of the reason)
    ('[parts.p]\nargs = ["--x", "a\\u0000b"]\n', "parts.p.args.1", "contains a NUL character"),
    ('[parts.p]\nenv = { "A=B" = "1" }\n', "parts.p.env.A=B.[key]", "'A=B' is not an environment variable name"),
    ('[parts.p]\nenv = { "" = "1" }\n', "parts.p.env..[key]", "'' is not an environment variable name"),
    ('[parts.p]\nenv = { A = "x\\u0000" }\n', "parts.p.env.A", "contains a NUL character"),
    ('[parts.p]\nbinary = "/bin/\\u0000sh"\n', "parts.p.binary", "contains a NUL character"),
    ('[recipes.cmd]\nengine = "openai"\ncommand = []\n', "recipes.cmd.command", "List should have at least 1 item"),
]


@pytest.mark.parametrize(("extra", "field", "why"), LAUNCH_TOML, ids=[c[1] for c in LAUNCH_TOML])
def test_frank_toml_refuses_what_no_program_can_be_given(tmp_path: Path, extra: str, field: str, why: str) -> None:
    root = tmp_path / "c"
    make_campaign(root).close()
    toml = root / "frank.toml"
    toml.write_text(toml.read_text() + extra)
    with pytest.raises(ConfigError) as err:
        load_config(toml)
    msg = str(err.value)
    assert msg.startswith(f"{toml}: {field}: ") and why in msg and "\n" not in msg, msg


def _part_design(campaign: Campaign, part_toml: str) -> Path:
    toml = campaign.root / "frank.toml"
    toml.write_text(toml.read_text() + "\n[parts.p]\n" + part_toml)
    path = campaign.root / "designs" / "d.toml"
    path.write_text(BASE.format(extra="", part="p"))
    return path


@pytest.mark.parametrize(
    ("part_toml", "why"),
    [
        ('binary = "/no/such/llama-server"\n', "binary /no/such/llama-server does not exist (recipe served+p)"),
        ('binary = "/tmp"\n', "binary /tmp is a directory, not a program (recipe served+p)"),
        ('binary = "{data}"\n', "binary {data} is not executable (recipe served+p)"),
    ],
)
def test_registration_refuses_a_binary_that_cannot_run(tmp_path: Path, part_toml: str, why: str) -> None:
    data = tmp_path / "data.txt"
    data.write_text("not a program")
    make_campaign(tmp_path / "c").close()
    with open_campaign(tmp_path / "c") as c:
        path = _part_design(c, part_toml.format(data=data))
    with open_campaign(tmp_path / "c") as c, pytest.raises(DesignError) as err:
        register(c, path)
    assert str(err.value) == f"{path}: arms.candidate: {why.format(data=data)}"


COMMAND_DESIGN = """\
name = "k"
blocks = 5
[arms.served]
command = {served}
[arms.candidate]
command = ["{py}", "-c", "print(1)"]
[rule]
kind = "sign"
"""


@pytest.mark.parametrize(
    ("served", "field", "why"),
    [
        ('["/no/such/bench"]', "arms.served.command", "command program /no/such/bench does not exist"),
        ('["no-such-bench-program"]', "arms.served.command", "command program 'no-such-bench-program' is not found"),
        ('["/tmp"]', "arms.served.command", "command program /tmp is a directory, not a program"),
        ("[]", "arms.served.command", "List should have at least 1 item"),
        ('["/bin/echo", "a\\u0000"]', "arms.served.command.1", "contains a NUL character"),
    ],
)
def test_registration_refuses_a_command_arm_that_cannot_run(
    campaign: Campaign, served: str, field: str, why: str
) -> None:
    path = campaign.root / "designs" / "k.toml"
    path.write_text(COMMAND_DESIGN.format(served=served, py=sys.executable))
    with pytest.raises(DesignError) as err:
        register(campaign, path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: {field}: ") and why in msg and "\n" not in msg, msg
    assert campaign.store.registry_rows() == []


def test_a_workload_hash_prefix_is_named_as_a_prefix(campaign: Campaign) -> None:
    """A design that pins the first 12 hex digits of the right hash: the message shows both digests far enough
    to differ, and says the pin is not the full sha256 (it printed two identical prefixes as a 'mismatch')."""
    full = load_trace(data_path("demo-workload.jsonl")).hash
    path = campaign.root / "designs" / "d.toml"
    path.write_text(BASE.format(extra=f'workload_hash = "{full[:12]}"', part="draft"))
    with pytest.raises(DesignError) as err:
        register(campaign, path)
    msg = str(err.value)
    assert "is not the workload's full sha256" in msg and f"design pins {full[:12]}, file has {full[:16]}…" in msg
    near = full[:20] + ("0" if full[20] != "0" else "1") + full[21:]
    path.write_text(BASE.format(extra=f'workload_hash = "{near}"', part="draft"))
    with pytest.raises(DesignError, match=f"no longer matches its hash.*pins {near[:24]}…, file has {full[:24]}…"):
        register(campaign, path)


def test_cli_inputs_that_were_unexpected_errors(tmp_path: Path, capsys) -> None:
    """Each input that ended in "unexpected; please report it" now has its own message (the real CLI)."""
    blocks = tmp_path / "blocks.csv"
    blocks.write_text("block,difference\n" + "".join(f"b{i},{(i % 7) - 3}\n" for i in range(1_000_000)))
    code, out, err = cli(capsys, "analyze", "--blocks", str(blocks), "--rule", "sign", "--direction", "lower")
    assert code == 1 and err == f"frank: error: {blocks}: 1000000 blocks; at most 1000 are analysed " + (
        "(a design's bound: the exact tests compute with fractions over every block, and a million blocks would run "
        "for hours)\n"
    ), err
    for args, named in (
        (["serve", "-c", str(tmp_path), "--cache-mb", "-1"], "--cache-mb"),
        (["serve", "-c", str(tmp_path), "--max-body-mb", "0"], "--max-body-mb"),
        (["record", "--upstream", "http://127.0.0.1:9", "--out", str(tmp_path / "t"), "--max-body-mb", "0"], "body"),
        (
            ["tasks", "draw", "not a url", "--trace", str(tmp_path / "t"), "--work-dir", str(tmp_path)],
            "not a url': expected http://HOST:PORT",
        ),
    ):
        code, _, err = cli(capsys, *args)
        assert code == 2 and named in err and "unexpected" not in err and "Traceback" not in err, (args, err)


def _frank_read_only(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``frank ARGS`` with the campaign folder read-only: a read-only bind mount in a mount namespace of its own
    where we are root (root writes through file modes), else the modes taken away."""
    cmd = [sys.executable, "-m", "frankenstein", *args]
    if os.geteuid() == 0:
        script = f'mount --bind "{root}" "{root}" && mount -o remount,bind,ro "{root}" && exec "$@"'
        cmd = ["unshare", "-m", "sh", "-c", script, "sh", *cmd]
    else:
        for p in [root, *root.rglob("*")]:
            p.chmod(p.stat().st_mode & ~0o222)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_a_read_only_campaign_verifies_and_names_itself_read_only(tmp_path: Path) -> None:
    """A read-only campaign said "unable to open database file" even for `verify` (issue 30): it is opened
    read-only, reading commands work, and a command that writes says the campaign is read-only, and why."""
    root = tmp_path / "c"
    c = make_campaign(root)
    make_workload(root / "workloads" / "w.jsonl")
    design = write_design(root / "designs" / "d.toml")
    register(c, design)
    c.close()
    run = _frank_read_only(root, "verify", "-c", str(root))
    if os.geteuid() == 0 and "mount" in run.stderr:
        pytest.skip(f"no mount namespace here to make a folder read-only as root: {run.stderr.strip()}")
    assert run.returncode == 0 and "registry verified: 1 design" in run.stdout, run.stderr
    run = _frank_read_only(root, "register", str(design), "-c", str(root))
    assert run.returncode == 1 and "unable to open" not in run.stderr, run.stderr
    assert run.stderr.strip().startswith(f"frank: error: {root / 'frank.db'}: the campaign is read-only (")
    assert "this command writes to it" in run.stderr and len(run.stderr.strip().splitlines()) == 1
