"""A Python engine's environment is pinned whole: the lock of its installed distributions (name, version, sha256 of
each RECORD) is taken at registration and checked before every start, so a package changed after registration
fails the start naming it. A real interpreter in a real virtual environment; the changed package is a real
``.dist-info`` the environment's ``importlib.metadata`` reads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from frankenstein.config import ResolvedRecipe
from frankenstein.design.pins import PACKAGES, check_arm, package_lock, pins_of_arm


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
