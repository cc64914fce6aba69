"""Names are slugs (``config.NAME_PATTERN``): a design, recipe, part or campaign name that could be a path is
refused with the file and the field, exit 1, and nothing is written outside the campaign folder (the whole
tree around it is compared before and after, on the real CLI)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from frankenstein.config import NAME_PATTERN
from frankenstein.design.registry import inside, register

from conftest import frank
from helpers_campaign import TOML, make_campaign, make_workload, write_design
from helpers_cli import cli

MESSAGE = "is not a name: a name is 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` (the campaign's own database files aside) with its size and mtime."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            if p.name.startswith("frank.db") or p.name == "frank.head":
                continue
            st = p.stat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


def bad_names(tmp_path: Path) -> list[str]:
    return [
        str(tmp_path / "outside" / "x"),
        "/tmp/x",
        "../../evil",
        "../evil",
        "a/b",
        "",
        "a" * 200,
        ".hidden",
        "-flag",
        "with space",
        "x\\y",
    ]


@pytest.fixture
def camp(tmp_path: Path):
    c = make_campaign(tmp_path / "area" / "c")
    make_workload(c.root / "workloads" / "w.jsonl")
    (tmp_path / "area" / "evil-1.toml").write_text("an existing file that a bad name used to overwrite\n")
    (tmp_path / "outside").mkdir()
    c.close()
    return c.root


def test_design_names_that_are_paths_are_refused_and_write_nothing(camp: Path, tmp_path: Path, capsys) -> None:
    names = bad_names(tmp_path)
    for i, name in enumerate(names):
        design = write_design(camp / f"bad{i}.toml", name=name.replace("\\", "\\\\"))
        before = tree(tmp_path)
        if i == 0:  # the real command line once, in a subprocess
            r = frank("register", str(design), "-c", str(camp))
            code, out, err = r.returncode, r.stdout, r.stderr
        else:
            code, out, err = cli(capsys, "register", str(design), "-c", str(camp))
        shown = name if len(name) <= 40 else name[:40] + "…"
        assert code == 1, (name, out)
        assert err.strip().splitlines() == [f"frank: error: {design}: name: {shown!r} {MESSAGE}"], err
        assert tree(tmp_path) == before, name  # nothing written anywhere, the campaign's designs/ included
    assert not list((camp / "designs").iterdir())
    assert (tmp_path / "area" / "evil-1.toml").read_text().startswith("an existing file")
    code, out, err = cli(capsys, "verify", "-c", str(camp))
    assert code == 0, err
    assert "registry verified: 0 designs" in out and f"evidence chain verified: {len(names)} records" in out


@pytest.mark.parametrize(
    "field,toml",
    [
        ("name", TOML.replace('name = "t"', 'name = "../../evil"')),
        ("served", TOML.replace('served = "base"', 'served = "/tmp/x"')),
        ("recipes", TOML.replace("[recipes.base]", '[recipes."a/b"]')),
        ("parts", TOML.replace("[parts.draft]", '[parts."../draft"]')),
        ("parts", TOML.replace("[parts.draft]", f"[parts.{'d' * 65}]")),
    ],
)
def test_campaign_recipe_and_part_names_are_slugs(tmp_path: Path, field: str, toml: str, capsys) -> None:
    root = tmp_path / "c"
    root.mkdir()
    (root / "frank.toml").write_text(toml)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    code, _, err = cli(capsys, "verify", "-c", str(root))
    assert code == 1
    [line] = err.strip().splitlines()
    assert line.startswith(f"frank: error: {root / 'frank.toml'}: {field}: ") and line.endswith(MESSAGE), line
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_names_in_use_are_slugs(tmp_path: Path) -> None:
    import re

    for name in (
        "d",
        "kernel",
        "draft-speed",
        "fid-wide",
        "agent-harm",
        "speed2",
        "tiny-vllm",
        "q8",
        "threads1",
        "test_names_in_use_are_slugs0",
        "frank-demo-k3j_x9",
        "v1.2",
        "A",
    ):
        assert re.fullmatch(NAME_PATTERN, name), name


def test_a_symlinked_designs_folder_is_not_written_through(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl")
    (tmp_path / "elsewhere").mkdir()
    (c.root / "designs").rmdir()
    (c.root / "designs").symlink_to(tmp_path / "elsewhere")
    from frankenstein.errors import DesignError

    with pytest.raises(DesignError, match=r"refusing to write .*elsewhere/d-1.toml: it is outside the campaign folder"):
        register(c, write_design(c.root / "d.toml"))
    assert not list((tmp_path / "elsewhere").iterdir()) and c.store.registry_rows() == []
    assert inside(c, c.root / "workloads" / ".." / "x") == (c.root / "x").resolve()
    c.close()


def test_init_makes_a_folder_name_with_spaces_a_slug(tmp_path: Path, capsys) -> None:
    """``frank init "My Camp"`` must give a campaign that loads: the default name is the folder made a slug."""
    root = tmp_path / "My Camp (v2)"
    code, _, err = cli(capsys, "init", str(root))
    assert code == 0, err
    name = next(line for line in (root / "frank.toml").read_text().splitlines() if line.startswith("name ="))
    assert name == 'name = "My-Camp-v2"'
    assert re.match(NAME_PATTERN, "My-Camp-v2")
    code, out, err = cli(capsys, "verify", "--campaign", str(root))
    assert code == 0, err + out
