"""Cache policy, registered: a ``cold`` design gives every start an empty cache folder of its own; a
``warm`` one gives each arm one folder that its later starts reuse, and never the other arm's. Shown with
command arms run by the real runner (they get the same launch environment as engines): the arm
program reports the cache variables it got and what it found there, then leaves a marker."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from frankenstein.design.caches import CACHE_VARS, cache_env, folder_for
from frankenstein.design.analysis import analyze
from frankenstein.design.phases import time_lines
from frankenstein.design.registry import register
from frankenstein.design.runner import run_design

from helpers_campaign import make_campaign

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


def _run(tmp_path: Path, cache: str) -> tuple[object, list[dict], Path]:
    c = make_campaign(tmp_path / "c")
    arm = c.root / "arm.py"
    arm.write_text(ARM.replace("VARS", repr(sorted(CACHE_VARS))))
    log = c.root / "seen.jsonl"
    design = c.root / f"{cache}.toml"
    design.write_text(DESIGN.format(name=cache, cache=cache, py=sys.executable, arm=arm, log=log))
    reg = register(c, design)
    if cache == "cold":  # a folder left behind at a start's path (a crashed run) is emptied for the start
        first = next(s for s in reg.slots() if s.arm == "served")
        left = folder_for(c.root, reg.design_id, "served", "cold", first) / "xdg"
        left.mkdir(parents=True)
        (left / "stale").write_text("from a crashed run")
    run_design(c, reg.design_id, echo=lambda s: None)
    seen = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(seen) == 6
    return c, seen, c.root / "caches" / reg.design_id


def test_warm_reuses_the_arms_own_folder_only(tmp_path: Path) -> None:
    c, seen, base = _run(tmp_path, "warm")
    for arm in ("served", "candidate"):
        mine = [s for s in seen if s["arm"] == arm]
        for var, sub in CACHE_VARS.items():
            assert {s["env"][var] for s in mine} == {str(base / arm / "warm" / sub)}  # one folder per arm
        for k, s in enumerate(mine):  # the k-th start finds the markers of its arm's k earlier starts, per variable
            assert len(s["seen"]) == k * len(CACHE_VARS)
            assert all(name.startswith(arm + "-") for name in s["seen"]), s["seen"]  # never the other arm's
    rows = c.store.starts_of("warm-1")  # type: ignore[attr-defined]
    empty = {(r.arm, r.resources["caches"]["empty_at_start"]) for r in rows}
    assert sum(r.resources["caches"]["empty_at_start"] for r in rows) == 2 and len(empty) == 4
    assert all(r.resources["caches"]["policy"] == "warm" for r in rows)
    assert all(r.phases["phases"]["command"] > 0 for r in rows)  # command arms: their run and the total
    text = "\n".join(time_lines(analyze(c, "warm-1").time_spent))  # type: ignore[arg-type]
    assert "engine caches: warm (each arm's own cache folders, kept across its starts); 2 of 6 starts began" in text


def test_cold_gives_every_start_an_empty_folder_of_its_own(tmp_path: Path) -> None:
    c, seen, base = _run(tmp_path, "cold")
    assert all(s["seen"] == [] for s in seen)  # the stale file of a crashed run included
    assert sum(1 for s in seen if s["arm"] == "served" and "cold-b1-" in s["env"]["XDG_CACHE_HOME"]) == 1
    folders = [s["env"]["XDG_CACHE_HOME"] for s in seen]
    assert len(set(folders)) == 6 and all(Path(f).parent.parent.parent == base for f in folders)
    assert not any(Path(f).exists() for f in folders)  # removed after each start
    rows = c.store.starts_of("cold-1")  # type: ignore[attr-defined]
    assert all(r.resources["caches"]["empty_at_start"] and r.resources["caches"]["policy"] == "cold" for r in rows)
    text = "\n".join(time_lines(analyze(c, "cold-1").time_spent))  # type: ignore[arg-type]
    assert (
        "engine caches: cold (an empty cache folder for every start); 6 of 6 starts began with an empty folder" in text
    )


def test_a_cache_folder_the_recipe_names_is_left_to_it(tmp_path: Path) -> None:
    env, left = cache_env(tmp_path, {"VLLM_CACHE_ROOT": "/mine", "HF_HOME": "/hf"})
    assert "VLLM_CACHE_ROOT" not in env and left == ["VLLM_CACHE_ROOT"]
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "torchinductor") and "HF_HOME" not in env
    env, _ = cache_env(tmp_path, {})
    assert Path(env["HF_HOME"]).name == "huggingface" and not env["HF_HOME"].startswith(str(tmp_path))
