"""Cache policy, registered: a ``cold`` design gives every start an empty cache folder of its own; a
``warm`` one gives each arm one folder that its later starts reuse, and never the other arm's. Shown with
command arms run by the real runner (they get the same launch environment as engines): the arm
program reports the cache variables it got and what it found there, then leaves a marker."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from conftest import frank
from frankenstein.campaign import Campaign
from frankenstein.config import ResolvedRecipe
from frankenstein.design.caches import cache_env, cache_vars, folder_for, recipe_key
from frankenstein.design.analysis import analyze
from frankenstein.report.phases import time_lines
from frankenstein.design.registry import register
from frankenstein.design.runner import run_design

from helpers_campaign import TOML, make_campaign, make_workload, write_design

ARM = """\
import json, os, sys
arm, log = sys.argv[1], sys.argv[2]
env = {k: os.environ.get(k) for k in VARS}
root = os.path.dirname(env["XDG_CACHE_HOME"])
seen = sorted(n for _, _, names in os.walk(root) for n in names)
with open(log, "a") as f:
    f.write(json.dumps({"arm": arm, "env": env, "seen": seen}) + "\\n")
for k, v in env.items():
    open(os.path.join(v, arm + "-" + str(os.getpid())), "w").write("compiled")
print(json.dumps({"verify_step_ms": 1.0 + len(seen)}))
"""

DESIGN = """\
name = "{name}"
kind = "screen"
blocks = 3
primary_metric = "verify_step_ms"
cache = "{cache}"

[arms.served]
command = ["{py}", "{arm}", "served", "{log}"]

[arms.candidate]
command = ["{py}", "{arm}", "candidate", "{log}"]

[rule]
kind = "all_blocks_better"
alpha = 0.5
"""


def _run(tmp_path: Path, cache: str) -> tuple[Campaign, list[dict], dict[str, Path]]:
    c = make_campaign(tmp_path / "c")
    arm = c.root / "arm.py"
    arm.write_text(ARM.replace("VARS", repr(sorted(cache_vars()))))
    log = c.root / "seen.jsonl"
    design = c.root / f"{cache}.toml"
    design.write_text(DESIGN.format(name=cache, cache=cache, py=sys.executable, arm=arm, log=log))
    reg = register(c, design)
    keys = {arm: recipe_key(None, spec.command) for arm, spec in reg.design.arms.items()}
    if cache == "cold":  # a folder left behind at a start's path (a crashed run) is emptied for the start
        first = next(s for s in reg.slots() if s.arm == "served")
        left = folder_for(c.root, keys["served"], "served", "cold", first, reg.design_id) / "xdg"
        left.mkdir(parents=True)
        (left / "stale").write_text("from a crashed run")
    run_design(c, reg.design_id, echo=lambda s: None)
    seen = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(seen) == 6
    return c, seen, {arm: c.root / "caches" / key / arm for arm, key in keys.items()}


def test_warm_reuses_the_arms_own_folder_only(tmp_path: Path) -> None:
    c, seen, base = _run(tmp_path, "warm")
    for arm in ("served", "candidate"):
        mine = [s for s in seen if s["arm"] == arm]
        for var, sub in cache_vars().items():
            assert {s["env"][var] for s in mine} == {str(base[arm] / "warm" / sub)}  # one folder per arm
        for k, s in enumerate(mine):  # the k-th start finds the markers of its arm's k earlier starts, per variable
            assert len(s["seen"]) == k * len(cache_vars())
            assert all(name.startswith(arm + "-") for name in s["seen"]), s["seen"]  # never the other arm's
    rows = c.store.starts_of("warm-1")
    empty = {(r.arm, r.resources["caches"]["empty_at_start"]) for r in rows}
    assert sum(r.resources["caches"]["empty_at_start"] for r in rows) == 2 and len(empty) == 4
    assert all(r.resources["caches"]["policy"] == "warm" for r in rows)
    assert all(r.phases["phases"]["command"] > 0 for r in rows)  # command arms: their run and the total
    text = "\n".join(time_lines(analyze(c, "warm-1").time_spent))
    assert "engine caches: warm (each arm's own cache folders, kept across its starts); 2 of 6 starts began" in text


def test_cold_gives_every_start_an_empty_folder_of_its_own(tmp_path: Path) -> None:
    c, seen, base = _run(tmp_path, "cold")
    assert all(s["seen"] == [] for s in seen)  # the stale file of a crashed run included
    assert sum(1 for s in seen if s["arm"] == "served" and "cold-cold-1-b1-" in s["env"]["XDG_CACHE_HOME"]) == 1
    folders = [s["env"]["XDG_CACHE_HOME"] for s in seen]
    assert len(set(folders)) == 6 and all(Path(f).parent.parent in base.values() for f in folders)
    assert not any(Path(f).exists() for f in folders)  # removed after each start
    rows = c.store.starts_of("cold-1")
    assert all(r.resources["caches"]["empty_at_start"] and r.resources["caches"]["policy"] == "cold" for r in rows)
    text = "\n".join(time_lines(analyze(c, "cold-1").time_spent))
    assert (
        "engine caches: cold (an empty cache folder for every start); 6 of 6 starts began with an empty campaign folder"
        in text
    )


def test_a_cache_folder_the_recipe_names_is_left_to_it(tmp_path: Path) -> None:
    recipe = ResolvedRecipe(
        name="r", engine="vllm", model="m", args=[], env={"VLLM_CACHE_ROOT": "/mine", "HF_HOME": "/hf"}
    )
    env, left = cache_env(tmp_path, recipe)
    assert "VLLM_CACHE_ROOT" not in env and left == ["VLLM_CACHE_ROOT"]
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "torchinductor") and "HF_HOME" not in env
    env, _ = cache_env(tmp_path, None)
    assert Path(env["HF_HOME"]).name == "huggingface" and not env["HF_HOME"].startswith(str(tmp_path))


# ---------------------------------------------------------------- a cache folder a part names (real llama-server)

WRAPPER = """\
#!/bin/sh
# what the start's engine was given: the named cache folder, what it held, and a variable left to the recipe
[ "$1" = "--version" ] && exec {server} "$@"  # frank asking the binary's version: not a start
echo "$KERNEL_CACHE|$(ls -A "$KERNEL_CACHE" | tr '\\n' ' ')|$VLLM_CACHE_ROOT" >> {log}
touch "$KERNEL_CACHE/kernel-$$"
exec {server} "$@"
"""

NAMED_TOML = """\
[recipes.base.env]
VLLM_CACHE_ROOT = "{shared}"

[parts.kcache]
description = "a kernel cache of its own, in KERNEL_CACHE"
binary = "{wrapper}"
cache_vars = ["KERNEL_CACHE"]
"""


def _named_run(
    tmp_path: Path, llama_server_bin: str, policy: str, designs: int = 1
) -> tuple[Campaign, list[list[str]]]:
    log = tmp_path / "engine.log"
    wrapper = tmp_path / "llama-wrapper"
    wrapper.write_text(WRAPPER.format(log=log, server=llama_server_bin))
    wrapper.chmod(0o755)
    toml = TOML.replace("start_timeout_s = 120\n", 'start_timeout_s = 120\nparts = ["kcache"]\n', 1)
    c = make_campaign(tmp_path / "c", toml + NAMED_TOML.format(shared=tmp_path / "shared", wrapper=wrapper))
    make_workload(c.root / "workloads" / "w.jsonl", turns=2, tokens=4)
    for n in range(designs):
        design = write_design(c.root / f"d{n}.toml", name=f"{policy}{n}", blocks=2, extra=f'cache = "{policy}"')
        design.write_text(design.read_text().replace("alpha = 0.05", "alpha = 0.5"))
        reg = register(c, design)
        run_design(c, reg.design_id, echo=lambda s: None)
        assert all(r.status == "ok" for r in c.store.starts_of(reg.design_id)), [
            (r.status, r.reason) for r in c.store.starts_of(reg.design_id)
        ]
    return c, [line.split("|") for line in log.read_text().splitlines()]


def test_a_cache_folder_a_part_names_is_the_arms_own_under_warm(tmp_path: Path, llama_server_bin: str) -> None:
    """Two warm designs of the same recipes: each arm's llama-server gets one KERNEL_CACHE folder of its
    own, keyed by its recipe; the second design's starts find the first design's markers of that arm."""
    c, seen = _named_run(tmp_path, llama_server_bin, "warm", designs=2)
    assert len(seen) == 8
    folders = [Path(s[0]) for s in seen]
    assert len(set(folders)) == 2  # one per arm, shared by both designs
    for folder in set(folders):
        mine = [s for s in seen if Path(s[0]) == folder]
        assert [len(s[1].split()) for s in mine] == [0, 1, 2, 3]  # the k-th start finds its arm's k markers
        assert folder.parts[-3:] == ("warm", "named", "KERNEL_CACHE"), folder
    rows = [r for d in ("warm0-1", "warm1-1") for r in c.store.starts_of(d)]
    for r in rows:
        caches = r.resources["caches"]
        assert caches["named"] == ["KERNEL_CACHE"] and "KERNEL_CACHE" in caches["vars"]
        assert caches["folder"].startswith(f"caches/{recipe_key(ResolvedRecipe.model_validate(r.recipe))}/{r.arm}/")
    text = "\n".join(time_lines(analyze(c, "warm0-1").time_spent))
    assert "2 of 4 starts began with an empty campaign folder" in text
    text = "\n".join(time_lines(analyze(c, "warm1-1").time_spent))
    assert "0 of 4 starts began with an empty campaign folder" in text  # the first design's compile reused


def test_cold_empties_a_named_cache_folder_and_says_what_it_left_outside(tmp_path: Path, llama_server_bin: str) -> None:
    c, seen = _named_run(tmp_path, llama_server_bin, "cold")
    assert len(seen) == 4 and len({s[0] for s in seen}) == 4  # a folder per start
    assert all(s[1] == "" for s in seen)  # each empty when its engine launched
    assert not any(Path(s[0]).exists() for s in seen)  # and removed after
    assert {s[2] for s in seen} == {str(tmp_path / "shared")}  # VLLM_CACHE_ROOT: the recipe's own
    text = "\n".join(time_lines(analyze(c, "cold0-1").time_spent))
    assert "4 of 4 starts began with an empty campaign folder" in text
    assert (
        "left to the recipe's own env, outside the campaign (shared by the arms, not emptied under cold): "
        "VLLM_CACHE_ROOT (4 start(s))" in text
    )


def test_a_variable_both_set_and_named_is_refused_naming_the_field(tmp_path: Path) -> None:
    toml = TOML + '\n[parts.bad]\nenv = { KC = "/x" }\ncache_vars = ["KC"]\n'
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "frank.toml").write_text(toml)
    r = frank("served", "-c", str(tmp_path / "c"))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "frank.toml: parts.bad.cache_vars: KC is both set in env and named in cache_vars" in r.stderr, r.stderr
