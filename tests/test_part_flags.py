"""Parts that say what they do to flags (``set``, ``remove``, ``args``/``add``), the launched command line
shown before anything starts (``frank engine command``, ``frank run --dry-run``), and read back from a real
llama-server's ``/proc/PID/cmdline``."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from frankenstein.campaign import open_campaign
from frankenstein.config import CampaignConfig, resolve
from frankenstein.design.registry import register
from frankenstein.engines import start_engine
from frankenstein.errors import DesignError
from frankenstein.flags import apply_part, is_flag, repeated_flags, set_flag, without

from conftest import frank, pids_of
from helpers_campaign import make_campaign, make_workload, write_design

BASE = """\
name = "t"
served = "base"

[recipes.base]
engine = "llamacpp"
model = "pkg:tiny-target.gguf"
args = ["--ctx-size", "2048", "--threads", "1", "--parallel", "1", "--seed", "1", "-fa", "on"]
start_timeout_s = 120

[parts.threads2]
description = "two threads"
set = { "--threads" = "2" }

[parts.fa]
description = "flash attention (the base already has it on)"
set = { "-fa" = "on" }

[parts.noseed]
remove = ["--seed"]
add = ["--no-warmup"]
"""


def test_set_replaces_every_occurrence_where_the_first_stood() -> None:
    args = ["--threads", "1", "-c", "512", "--threads=3", "--no-mmap"]
    assert set_flag(args, "--threads", "2") == ["--threads", "2", "-c", "512", "--no-mmap"]
    assert set_flag(args, "--batch-size", "64") == [*args, "--batch-size", "64"]
    assert set_flag(["--no-mmap", "-c", "5"], "--no-mmap", "") == ["--no-mmap", "-c", "5"]


def test_values_that_look_like_negative_numbers_stay_values() -> None:
    assert not is_flag("-1") and not is_flag("-0.5") and is_flag("-fa") and is_flag("--seed")
    assert without(["--seed", "-1", "-ngl", "99"], "--seed") == (["-ngl", "99"], 0)
    assert without(["--no-mmap", "--seed", "3"], "--no-mmap") == (["--seed", "3"], 0)


def test_a_part_removes_then_sets_then_appends() -> None:
    out = apply_part(["--seed", "1", "--threads", "1"], ["--seed"], {"--threads": "4"}, ["--no-warmup"])
    assert out == ["--threads", "4", "--no-warmup"]
    assert repeated_flags(["--threads", "1", "--threads", "2", "-c", "9"]) == ["--threads"]


def test_resolved_recipe_has_one_threads_flag() -> None:
    import tomllib

    cfg = CampaignConfig.model_validate(tomllib.loads(BASE))
    r = resolve(cfg, "base", ["threads2", "noseed"])
    assert r.args.count("--threads") == 1 and r.args[r.args.index("--threads") + 1] == "2"
    assert "--seed" not in r.args and r.args[-1] == "--no-warmup"


@pytest.mark.parametrize(
    ("part", "message"),
    [
        ('set = { "threads" = "2" }', "parts.bad.set: 'threads' is not a flag"),
        ('remove = ["--threads=2"]', "parts.bad.remove: '--threads=2' is not a flag"),
        ('sett = { "--threads" = "2" }', "parts.bad.sett"),
    ],
)
def test_bad_flag_changes_name_the_field(tmp_path: Path, part: str, message: str) -> None:
    root = tmp_path / "c"
    frank("init", str(root))
    (root / "frank.toml").write_text(BASE + f"\n[parts.bad]\n{part}\n")
    r = frank("engine", "command", "-c", str(root))
    assert r.returncode != 0 and "frank.toml" in r.stderr and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_arms_that_resolve_identically_are_refused_naming_the_parts(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path / "c", BASE)
    try:
        make_workload(camp.root / "workloads" / "w.jsonl")
        with pytest.raises(DesignError, match=r"arms: the two arms are identical: part\(s\) fa resolve to the command"):
            register(camp, write_design(camp.root / "d.toml", candidate_parts='["fa"]'))
    finally:
        camp.close()


def test_dry_run_prints_every_arm_and_starts_nothing(tmp_path: Path, llama_server_bin: str) -> None:
    camp = make_campaign(tmp_path / "c", BASE)
    make_workload(camp.root / "workloads" / "w.jsonl")
    camp.close()
    design = write_design(tmp_path / "c" / "d.toml", candidate_parts='["threads2"]')
    r = frank("run", "--dry-run", str(design), "-c", str(tmp_path / "c"))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "not registered" in lines[0]
    served = shlex.split(lines[lines.index("served (served):") + 1])
    cand = shlex.split(lines[lines.index("candidate (served+threads2):") + 1])
    assert served[served.index("--threads") + 1] == "1" and cand[cand.index("--threads") + 1] == "2"
    assert cand.count("--threads") == 1 and "{port}" in cand
    assert pids_of(str(tmp_path)) == []
    with open_campaign(tmp_path / "c") as c:
        assert c.store.registry_rows() == []
    shown = frank("engine", "command", "base", "--part", "threads2", "-c", str(tmp_path / "c"))
    assert shown.returncode == 0 and shlex.split(shown.stdout.splitlines()[1]) == cand


@pytest.mark.engine
def test_set_replaces_threads_in_the_launched_process(tmp_path: Path, llama_server_bin: str) -> None:
    """The running llama-server's own /proc/PID/cmdline holds one --threads, with the part's value, and the
    engine log's first line is that command line."""
    import tomllib

    cfg = CampaignConfig.model_validate(tomllib.loads(BASE))
    recipe = resolve(cfg, "base", ["threads2"])
    with start_engine(recipe, tmp_path) as eng:
        assert eng.pid is not None
        argv = Path(f"/proc/{eng.pid}/cmdline").read_bytes().rstrip(b"\0").decode().split("\0")
        log = eng.log_path
    assert argv.count("--threads") == 1 and argv[argv.index("--threads") + 1] == "2"
    assert log is not None
    first = log.read_text().splitlines()[0]
    assert first.startswith("# frank launched: ") and shlex.split(first.removeprefix("# frank launched: ")) == argv
