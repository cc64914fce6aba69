"""A Python engine's environment is pinned whole: the lock of its installed distributions (name, version, sha256 of
each RECORD) is taken at registration and checked before every start, so a package changed after registration
fails the start naming it. A real interpreter in a real virtual environment; the changed package is a real
``.dist-info`` the environment's ``importlib.metadata`` reads."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from frankenstein.config import ResolvedRecipe
from frankenstein.design.model import Slot
from frankenstein.design.pins import BINARY, PACKAGES, check_arm, package_lock, pins_of_arm
from frankenstein.design.registry import register
from frankenstein.design.runner import pinned_files_check

from helpers_campaign import TOML, make_campaign, make_workload, write_design


def _venv_with(tmp_path: Path, version: str) -> tuple[Path, Path]:
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    site = next((env / "lib").glob("python3*/site-packages"))
    dist = site / "fork_kernels-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: fork-kernels\nVersion: {version}\n")
    (dist / "RECORD").write_text("fork_kernels/__init__.py,sha256=abc,10\n")
    return env / "bin" / "python", dist


def test_a_package_changed_after_registration_fails_the_start(tmp_path: Path) -> None:
    python, dist = _venv_with(tmp_path, "1.0")
    recipe = ResolvedRecipe(
        name="v", engine="vllm", model="", args=[], env={}, python=str(python), command=["serve", "{port}"]
    )
    pins = pins_of_arm("candidate", recipe, None)
    lock = [p for p in pins if p.role == PACKAGES]
    assert len(lock) == 1 and lock[0].path == str(python)
    assert "fork-kernels 1.0 " in (package_lock(str(python)) or "")
    assert check_arm(pins, recipe, "candidate", "here", "the design registered") is None
    (dist / "RECORD").write_text("fork_kernels/__init__.py,sha256=CHANGED,10\n")  # same version, other files
    why = check_arm(pins, recipe, "candidate", "here", "the design registered")
    assert why is not None and why.startswith(f"host here: python packages {python} has sha256 ")
    (dist / "RECORD").write_text("fork_kernels/__init__.py,sha256=abc,10\n")
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fork-kernels\nVersion: 1.1\n")  # another version
    assert check_arm(pins, recipe, "candidate", "here", "the design registered") is not None


def test_a_recipe_without_its_own_python_takes_no_lock(tmp_path: Path) -> None:
    recipe = ResolvedRecipe(name="l", engine="llamacpp", model="", args=[], env={})
    assert all(p.role != PACKAGES for p in pins_of_arm("served", recipe, None))


def _engine_recipe(engine: str) -> ResolvedRecipe:
    """A recipe with neither ``python`` nor ``command``: the adapter finds its interpreter itself."""
    return ResolvedRecipe(name="v", engine=engine, model="org/model", args=[], env={})


@pytest.mark.parametrize(("engine", "variable"), [("vllm", "FRANK_VLLM_PYTHON"), ("sglang", "FRANK_SGLANG_PYTHON")])
def test_the_interpreter_an_engine_finds_itself_is_pinned_with_its_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str, variable: str
) -> None:
    """Registered with ``$VARIABLE`` at one environment, a start fails naming the lock once the variable points
    at another environment, or once a package of the first changes; the interpreter's real file is pinned."""
    monkeypatch.chdir(tmp_path)  # no ./.venv-vllm here
    first, dist = _venv_with(tmp_path / "a", "1.0")
    other, _ = _venv_with(tmp_path / "b", "2.0")
    monkeypatch.setenv(variable, str(first))
    recipe = _engine_recipe(engine)
    pins = pins_of_arm("candidate", recipe, None)
    by_role = {p.role: p for p in pins}
    assert by_role[PACKAGES].path == str(first)  # the environment's entry point, not the file it links to
    assert by_role[BINARY].path == os.path.realpath(first) != str(first)
    assert check_arm(pins, recipe, "candidate", "here", "the design registered") is None
    monkeypatch.setenv(variable, str(other))  # another environment after registration
    why = check_arm(pins, recipe, "candidate", "here", "the design registered")
    assert why is not None and why.startswith(f"host here: python packages {other} has sha256 ")
    assert why.endswith(f"the design registered {by_role[PACKAGES].sha256[:12]}… ({first})")
    monkeypatch.setenv(variable, str(first))
    (dist / "RECORD").write_text("fork_kernels/__init__.py,sha256=CHANGED,10\n")  # a package changed in it
    why = check_arm(pins, recipe, "candidate", "here", "the design registered")
    assert why is not None and why.startswith(f"host here: python packages {first} has sha256 ")
    monkeypatch.delenv(variable)  # no interpreter found now: its pins are missing, not skipped
    why = check_arm(pins, recipe, "candidate", "here", "the design registered")
    assert (
        why
        == f"host here: engine binary {by_role[BINARY].path} is missing (the design registered sha256 {by_role[BINARY].sha256[:12]}…)"
    )


def test_the_local_vllm_environment_is_pinned_as_the_adapter_finds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No recipe ``python`` and no ``$FRANK_VLLM_PYTHON``: ``./.venv-vllm/bin/python`` where frank runs is what the
    adapter launches, so that is pinned; replaced by another environment, the start fails."""
    python, _ = _venv_with(tmp_path, "1.0")
    (tmp_path / ".venv-vllm").symlink_to(python.parent.parent)
    monkeypatch.delenv("FRANK_VLLM_PYTHON", raising=False)
    monkeypatch.chdir(tmp_path)
    recipe = _engine_recipe("vllm")
    pins = pins_of_arm("served", recipe, None)
    assert [p.path for p in pins if p.role == PACKAGES] == [str(tmp_path / ".venv-vllm" / "bin" / "python")]
    (tmp_path / ".venv-vllm").unlink()
    other, _ = _venv_with(tmp_path / "b", "1.1")
    (tmp_path / ".venv-vllm").symlink_to(other.parent.parent)
    assert check_arm(pins, recipe, "served", "here", "the design registered") is not None


def test_a_recipe_running_its_own_command_pins_no_engine_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FRANK_VLLM_PYTHON", sys.executable)
    recipe = ResolvedRecipe(name="v", engine="vllm", model="", args=[], env={}, command=["true", "{port}"])
    assert all(p.role != PACKAGES for p in pins_of_arm("served", recipe, None))


def test_registration_pins_the_environment_and_a_start_after_a_switch_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through registration and the runner's check before each start: a vLLM design registered with
    ``$FRANK_VLLM_PYTHON`` at one environment gets a failed start naming the lock once it points at another."""
    monkeypatch.chdir(tmp_path)
    first, _ = _venv_with(tmp_path / "a", "1.0")
    other, _ = _venv_with(tmp_path / "b", "1.0-patched")
    monkeypatch.setenv("FRANK_VLLM_PYTHON", str(first))
    toml = TOML.replace('engine = "llamacpp"\nmodel = "pkg:tiny-target.gguf"', 'engine = "vllm"\nmodel = "org/m"')
    c = make_campaign(tmp_path / "c", toml=toml)
    make_workload(c.root / "workloads" / "w.jsonl", turns=2)
    reg = register(c, write_design(c.root / "d.toml", blocks=5))
    c.close()
    roles = {p["role"]: p["path"] for p in reg.frozen.files["served"]}
    assert roles[PACKAGES] == str(first) and roles[BINARY] == os.path.realpath(first)
    check = pinned_files_check(reg)
    assert check is not None and check(Slot(0, 0, "served", 0)) is None
    monkeypatch.setenv("FRANK_VLLM_PYTHON", str(other))
    failed = check(Slot(0, 0, "served", 0))
    assert failed is not None and failed.status == "failed"
    assert (failed.reason or "").startswith(f"host {socket.gethostname()}: python packages {other} has sha256 ")
