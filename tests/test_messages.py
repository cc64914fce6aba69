"""Every unknown recipe, part or metric is one line naming the file and the field (the real CLI, in process):
``designs/x.toml: arms.candidate.parts[0]: unknown part 'ngramm' (known: …)``, ``frank.toml: served: unknown recipe
'smoll' (known: …)``; exit 1, no traceback, and nothing is registered."""

from __future__ import annotations

from pathlib import Path

import pytest

from frankenstein.campaign import open_campaign
from helpers_campaign import TOML, make_campaign, make_workload, write_design
from helpers_cli import cli

KNOWN_PARTS = "(known: draft, threads1)"


def refused(capsys, expected: str, *args: str) -> None:
    code, out, err = cli(capsys, *args)
    assert code == 1 and out == "", (code, out, err)
    assert err == f"frank: error: {expected}\n", err
    assert "Traceback" not in err


@pytest.fixture
def camp(tmp_path: Path) -> Path:
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl")
    c.close()
    return tmp_path / "c"


@pytest.mark.parametrize(
    ("arms", "field", "why"),
    [
        ('parts = ["threads1", "ngramm"]', "arms.candidate.parts[1]", f"unknown part 'ngramm' {KNOWN_PARTS}"),
        ('parts = ["ngramm"]', "arms.candidate.parts[0]", f"unknown part 'ngramm' {KNOWN_PARTS}"),
    ],
)
def test_design_part_names_the_design_file_and_the_part(camp: Path, capsys, arms: str, field: str, why: str) -> None:
    d = write_design(camp / "designs-src.toml", name="kvq8-fid")
    d.write_text(d.read_text().replace('parts = ["threads1"]', arms))
    refused(capsys, f"{d}: {field}: {why}", "register", str(d), "-c", str(camp))
    with open_campaign(camp) as c:
        assert c.store.registry_rows() == [] and len(c.store.refusals()) == 1  # refused and kept as a refusal


def test_design_recipe_names_the_arm_recipe(camp: Path, capsys) -> None:
    d = write_design(camp / "x.toml")
    d.write_text(
        d.read_text().replace(
            '[arms.candidate]\nrecipe = "served"\nparts = ["threads1"]', '[arms.candidate]\nrecipe = "smoll"'
        )
    )
    refused(
        capsys, f"{d}: arms.candidate.recipe: unknown recipe 'smoll' (known: base)", "register", str(d), "-c", str(camp)
    )


@pytest.mark.parametrize(
    ("field", "value", "named", "why"),
    [
        ("primary_metric", '"verify_step_mss"', "primary_metric", "unknown metric 'verify_step_mss'"),
        ("secondary", '["tokens_per_step", "no_such_metric"]', "secondary[1]", "unknown metric 'no_such_metric'"),
    ],
)
def test_design_metric_names_the_field(camp: Path, capsys, field: str, value: str, named: str, why: str) -> None:
    d = write_design(camp / "m.toml")
    text = "\n".join(
        f"{field} = {value}" if line.startswith(f"{field} =") else line for line in d.read_text().splitlines()
    )
    d.write_text(text + "\n")
    code, _, err = cli(capsys, "register", str(d), "-c", str(camp))
    assert code == 1 and err.startswith(f"frank: error: {d}: {named}:") and why in err and "Traceback" not in err, err


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (('served = "base"', 'served = "smoll"'), "served: unknown recipe 'smoll' (known: base)"),
        (
            ("start_timeout_s = 120", 'start_timeout_s = 120\nparts = ["draft", "ngramm"]'),
            f"recipes.base.parts[1]: unknown part 'ngramm' {KNOWN_PARTS}",
        ),
    ],
)
def test_frank_toml_names_itself_and_the_field(tmp_path: Path, capsys, change: tuple[str, str], expected: str) -> None:
    root = tmp_path / "c"
    make_campaign(root).close()
    (root / "frank.toml").write_text(TOML.replace(*change))
    refused(capsys, f"{root / 'frank.toml'}: {expected}", "served", "-c", str(root))


def test_command_line_names_are_looked_up_in_frank_toml(camp: Path, capsys) -> None:
    toml = camp / "frank.toml"
    refused(
        capsys, f"{toml}: recipes: unknown recipe 'smoll' (known: base)", "engine", "check", "smoll", "-c", str(camp)
    )
    refused(
        capsys,
        f"{toml}: parts: unknown part 'ngramm' {KNOWN_PARTS}",
        "replay",
        "base",
        str(camp / "workloads" / "w.jsonl"),
        "--part",
        "ngramm",
        "-c",
        str(camp),
    )


def test_an_engine_the_adapter_table_lacks_names_the_recipe_field(tmp_path: Path, capsys) -> None:
    root = tmp_path / "c"
    make_campaign(root, toml=TOML.replace('engine = "llamacpp"', 'engine = "trtllm"')).close()
    code, _, err = cli(capsys, "engine", "check", "base", "--part", "draft", "-c", str(root))
    assert code == 1 and err.startswith("frank: error: frank.toml: recipes.base.engine: unknown engine 'trtllm'"), err
    assert "Traceback" not in err
