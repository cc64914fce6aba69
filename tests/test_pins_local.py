"""The files registration pinned are checked before every local start too, not only on a cluster host: a
file an arm runs that changed after registration makes that arm's starts failed starts naming the file and
the registered hash, while the other arm runs. (The cluster's own checks: tests/test_cluster*.py.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from frankenstein.campaign import open_campaign

from conftest import frank
from helpers_campaign import make_campaign

BENCH = """\
import json, sys
print(json.dumps({"verify_step_ms": float(sys.argv[1]), "tokens_per_step": 1.0}))
"""

DESIGN = """\
name = "pinned"
kind = "speed"
blocks = 4
primary_metric = "verify_step_ms"

[arms.served]
command = {served}

[arms.candidate]
command = {candidate}

[rule]
kind = "all_blocks_better"
alpha = 0.1
"""


def test_a_file_changed_after_registration_fails_its_arms_starts_naming_it(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    c.close()
    bench, kernel = c.root / "bench.py", c.root / "kernel.bin"
    bench.write_text(BENCH)
    kernel.write_bytes(b"kernel v1")
    served = json.dumps([sys.executable, str(bench), "2.0"])
    candidate = json.dumps([sys.executable, str(bench), "1.5", str(kernel)])
    design = c.root / "d.toml"
    design.write_text(DESIGN.format(served=served, candidate=candidate))
    r = frank("register", str(design), "-c", str(c.root))
    assert r.returncode == 0, r.stderr
    did = r.stdout.split()[1]

    kernel.write_bytes(b"kernel v2, swapped in after registration")
    r = frank("run", did, "-c", str(c.root), timeout=300)
    assert r.returncode == 0, r.stderr + r.stdout
    with open_campaign(c.root) as camp:
        rows = camp.store.starts_of(did)
    assert len(rows) == 8
    served_rows = [s for s in rows if s.arm == "served"]
    cand_rows = [s for s in rows if s.arm == "candidate"]
    assert all(s.ok for s in served_rows)
    assert all(s.status == "failed" for s in cand_rows)
    why = cand_rows[0].reason or ""
    assert f"command file {kernel} has sha256 " in why and "the design registered" in why, why
    assert "candidate: failed" in r.stdout and "the design registered" in r.stdout


def test_unchanged_files_run_and_the_pins_are_in_the_registered_design(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    c.close()
    bench = c.root / "bench.py"
    bench.write_text(BENCH)
    served = json.dumps([sys.executable, str(bench), "2.0"])
    candidate = json.dumps([sys.executable, str(bench), "1.5"])
    design = c.root / "d.toml"
    design.write_text(DESIGN.format(served=served, candidate=candidate))
    r = frank("register", str(design), "-c", str(c.root))
    assert r.returncode == 0, r.stderr
    did = r.stdout.split()[1]
    r = frank("run", did, "-c", str(c.root), timeout=300)
    assert r.returncode == 0, r.stderr
    from frankenstein.design.registry import get

    with open_campaign(c.root) as camp:
        rows = camp.store.starts_of(did)
        files = get(camp, did).frozen.files
    assert len(rows) == 8 and all(s.ok for s in rows)
    # python, the interpreter it really is (the venv's python is a link), libpython, bench.py
    assert {p["role"] for p in files["candidate"]} >= {"command program", "interpreter", "command file"}


def test_every_file_of_a_model_folder_is_pinned_and_checked(tmp_path: Path) -> None:
    """A model given as a folder (vLLM's Hugging Face layout) is pinned file by file, the same list the
    prefetch reads; a weight file swapped inside the folder after registration is named."""
    from frankenstein.design.pins import check_arm, registered
    from frankenstein.design.prefetch import files_of
    from frankenstein.design.registry import register

    from helpers_campaign import TOML, make_workload, write_design

    folder = tmp_path / "hf-model"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "sub" / "model.safetensors").write_bytes(b"weights v1")
    toml = TOML.replace('engine = "llamacpp"\nmodel = "pkg:tiny-target.gguf"', f'engine = "vllm"\nmodel = "{folder}"')
    c = make_campaign(tmp_path / "c", toml=toml)
    make_workload(c.root / "workloads" / "w.jsonl", turns=2)
    reg = register(c, write_design(c.root / "d.toml", blocks=5))
    c.close()
    pinned = [p for p in registered(reg.frozen.files) if p.arm == "served" and p.role == "model"]
    assert sorted(Path(p.path).name for p in pinned) == ["config.json", "model.safetensors"]
    recipe = reg.frozen.recipes["served"]
    assert recipe is not None
    assert [Path(p.path) for p in pinned] == files_of(recipe)  # what is pinned is what the prefetch reads
    assert check_arm(pinned, recipe, "served", "here", "the design registered") is None

    (folder / "sub" / "model.safetensors").write_bytes(b"weights v2")
    why = check_arm(pinned, recipe, "served", "here", "the design registered")
    assert why is not None and f"model {folder.resolve() / 'sub' / 'model.safetensors'} has sha256" in why
