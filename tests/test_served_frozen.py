"""What is served is what was tested: adopt freezes the candidate's resolved recipe and pins into its ledger step;
`frank serve` refuses (naming the difference) when frank.toml or a pinned file now disagrees, `frank served`
shows the frozen recipe with its pins. Real store, real registry, the real CLI in-process; no engine is started
(every refusal comes before a launch)."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from frankenstein.campaign import open_campaign
from frankenstein.design.serving import checked, served_now
from frankenstein.engines.process import free_port
from frankenstein.errors import LedgerError
from frankenstein.shipped import data_path
from frankenstein.store import LedgerEntry

from helpers_campaign import TOML, make_campaign, make_workload, write_design
from conftest import pids_of
from helpers_cli import cli
from test_serve import start_cli, wait_listening
from helpers_ledger import CONFIRMED, stored_design


def _adopted(tmp_path: Path, toml: str = TOML) -> Path:
    c = make_campaign(tmp_path / "c", toml)
    make_workload(c.root / "workloads" / "w.jsonl")
    stored_design(c, name="good", served=CONFIRMED[0], candidate=CONFIRMED[1])
    c.close()
    return c.root


def _edit(root: Path, old: str, new: str) -> None:
    toml = root / "frank.toml"
    text = toml.read_text()
    assert old in text
    toml.write_text(text.replace(old, new))


@pytest.fixture
def root(tmp_path: Path, capsys) -> Path:
    r = _adopted(tmp_path)
    code, _, err = cli(capsys, "adopt", "draft", "--design", "good-1", "-c", str(r))
    assert code == 0, err
    return r


def test_served_shows_the_frozen_recipe_with_its_pins(root: Path, capsys) -> None:
    code, out, _ = cli(capsys, "served", "-c", str(root))
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "served: base + draft"
    assert "  recipe: frozen at ledger step 1 (adopt draft on design good-1)" in lines
    assert "  args: --ctx-size 2048 --threads 1 --parallel 1 --seed 1 -md " in out
    assert any(line.startswith("  pin: model ") and "tiny-target.gguf sha256 " in line for line in lines)
    assert any(line.startswith("  pin: draft model ") and "tiny-draft.gguf" in line for line in lines)
    assert "DISAGREES" not in out


EDITS = [
    (
        "a part's args",
        '"--spec-draft-n-max", "8"]',
        '"--spec-draft-n-max", "16"]',
        "frank.toml: the served recipe's args is now [--ctx-size 2048 --threads 1 --parallel 1 --seed 1 -md ",
    ),
    (
        "the base model",
        'model = "pkg:tiny-target.gguf"',
        'model = "pkg:tiny-target-q8.gguf"',
        "frank.toml: the served recipe's model is now ",
    ),
    (
        "served =",
        'served = "base"',
        'served = "other"\n[recipes.other]\nengine = "llamacpp"\nmodel = "pkg:tiny-target.gguf"\nargs = []\n',
        "frank.toml: served = 'other', but the adopted recipe was frozen on 'base'",
    ),
    (
        "the base recipe's parts",
        "start_timeout_s = 120",
        'start_timeout_s = 120\nparts = ["threads1"]',
        "frank.toml: the served recipe's args is now [",
    ),
]


@pytest.mark.parametrize(("what", "old", "new", "named"), EDITS, ids=[e[0] for e in EDITS])
def test_serve_refuses_frank_toml_edited_after_adoption(
    root: Path, capsys, what: str, old: str, new: str, named: str
) -> None:
    _edit(root, old, new)
    code, _, err = cli(capsys, "serve", "-c", str(root), "--listen", "127.0.0.1:0")
    assert code == 1
    assert err.startswith("frank: error: serve refuses: the served recipe (frozen at ledger step 1 (adopt draft"), err
    assert named in err, err
    assert "Traceback" not in err
    code, out, _ = cli(capsys, "served", "-c", str(root))
    assert code == 0 and "  DISAGREES: " + named in out
    assert "args: --ctx-size 2048 --threads 1 --parallel 1 --seed 1 -md " in out  # the frozen recipe, not the edit
    assert "--spec-draft-n-max 8" in out


def test_forced_serve_records_the_override_and_serves_the_frozen_recipe(root: Path) -> None:
    _edit(root, '"--spec-draft-n-max", "8"]', '"--spec-draft-n-max", "16"]')
    with open_campaign(root) as c:
        with pytest.raises(LedgerError, match="--force needs --why"):
            checked(c, "serve", force=True, why=" ")
        served = checked(c, "serve", force=True, why="trying 16 before a design")
        assert served.recipe.args[-1] == "8"  # what was tested, not what frank.toml says now
        (o,) = c.store.overrides()
        assert (o.command, o.why) == ("serve", "trying 16 before a design")
        assert "args is now" in o.problem


def test_a_changed_pinned_file_is_named(tmp_path: Path, capsys) -> None:
    draft = tmp_path / "models" / "draft.gguf"
    draft.parent.mkdir()
    shutil.copy(data_path("tiny-draft.gguf"), draft)
    r = _adopted(tmp_path, TOML.replace("pkg:tiny-draft.gguf", str(draft)))
    assert cli(capsys, "adopt", "draft", "--design", "good-1", "-c", str(r))[0] == 0
    with draft.open("ab") as f:
        f.write(b"\0")
    code, _, err = cli(capsys, "serve", "-c", str(r), "--listen", "127.0.0.1:0")
    assert code == 1
    assert f"draft model {draft.resolve()} has sha256 " in err and "adoption froze" in err, err


def test_revert_serves_the_earlier_frozen_recipe_and_base_is_resolved_now(root: Path, capsys) -> None:
    assert cli(capsys, "revert", "-c", str(root), "--why", "back")[0] == 0
    with open_campaign(root) as c:
        s = served_now(c)
        assert (s.frozen, s.parts) == (False, [])
        assert s.why == "resolved from frank.toml now: ledger step 2 went back to the base recipe"
    assert cli(capsys, "revert", "-c", str(root), "--why", "again")[0] == 0  # re-applies the adopt
    with open_campaign(root) as c:
        s = served_now(c)
        assert (s.frozen, s.parts, s.problems) == (True, ["draft"], [])


def test_a_step_written_before_frozen_recipes_resolves_now_and_says_so(tmp_path: Path) -> None:
    r = _adopted(tmp_path)
    with open_campaign(r) as c:
        c.store.append_ledger(lambda last: _legacy_step())
        s = served_now(c)
    assert not s.frozen and s.parts == ["draft"]
    assert s.why == "resolved from frank.toml now: ledger step 1 was written before adopt froze the served recipe"


def _legacy_step() -> LedgerEntry:
    return LedgerEntry(0, "adopt", "draft", "good-1", {"design_id": "good-1"}, False, None, ["draft"], "")


def test_a_served_arm_is_refused_while_frank_toml_disagrees_with_what_is_served(root: Path, capsys) -> None:
    _edit(root, '"--spec-draft-n-max", "8"]', '"--spec-draft-n-max", "16"]')
    design = write_design(root / "next.toml", name="next", candidate_parts='["threads1"]')
    code, _, err = cli(capsys, "register", str(design), "-c", str(root))
    assert code == 1 and "Traceback" not in err
    assert (
        f"{design}: arms.served.recipe: the served recipe (frozen at ledger step 1 (adopt draft on design good-1))"
        in err
    )
    assert "frank.toml: the served recipe's args is now [" in err
    _edit(root, '"--spec-draft-n-max", "16"]', '"--spec-draft-n-max", "8"]')  # put back: registers
    assert cli(capsys, "register", str(design), "-c", str(root))[0] == 0


@pytest.mark.engine
def test_a_forced_serve_launches_the_frozen_recipe_not_the_edit(
    root: Path, tmp_path: Path, llama_server_bin: str
) -> None:
    """The real `frank serve --force --why` after frank.toml was edited: a warning on stderr, the override recorded,
    and the llama-server it starts runs the frozen args (draft n max 8), not frank.toml's (16)."""
    _edit(root, '"--spec-draft-n-max", "8"]', '"--spec-draft-n-max", "16"]')
    proc = start_cli(
        "-c", str(root), "--listen", f"127.0.0.1:{free_port()}", "--force", "--why", "trying", cwd=tmp_path
    )
    try:
        _, engine = wait_listening(proc)
        (pid,) = pids_of(f"--port {engine.rsplit(':', 1)[1]}")
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert cmdline[cmdline.index(b"--spec-draft-n-max") + 1] == b"8"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert "warning: the served recipe (frozen at ledger step 1 (adopt draft on design good-1)) disagrees" in err, err
    with open_campaign(root) as c:
        assert [(o.command, o.why) for o in c.store.overrides()] == [("serve", "trying")]
