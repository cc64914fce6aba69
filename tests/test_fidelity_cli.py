"""``frank fidelity``: help with examples, and bad input named before any engine starts."""

from __future__ import annotations

from pathlib import Path

from conftest import frank
from helpers_campaign import make_campaign, make_workload


def test_help_has_examples() -> None:
    for args in (["fidelity", "--help"], ["fidelity", "check", "--help"], ["fidelity", "fill", "--help"]):
        r = frank(*args)
        assert r.returncode == 0 and "Example: frank fidelity " in r.stdout, args


def test_bad_input_is_named(tmp_path: Path) -> None:
    make_campaign(tmp_path / "c").close()
    wl = make_workload(tmp_path / "w.jsonl", turns=1)
    r = frank("fidelity", "check", "base", "--part", "nope", "-w", str(wl), "-c", str(tmp_path / "c"))
    assert r.returncode == 1
    toml = tmp_path / "c" / "frank.toml"
    assert r.stderr == f"frank: error: {toml}: parts: unknown part 'nope' (known: draft, threads1)\n"
    r = frank(
        "fidelity", "check", "base", "--part", "draft", "-w", str(tmp_path / "missing.jsonl"), "-c", str(tmp_path / "c")
    )
    assert r.returncode == 1
    assert r.stderr == f"frank: error: {tmp_path / 'missing.jsonl'}: file not found\n"
    r = frank("fidelity", "check", "base", "-w", str(wl), "-c", str(tmp_path / "c"))
    assert r.returncode == 2 and "Missing option '--part'" in r.stderr
