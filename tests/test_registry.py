"""Registration, refusals, the hash chain and tamper detection (real SQLite store, no engine)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import get_args

import pytest

from frankenstein.design.kinds import KINDS, DesignKind
from frankenstein.design.model import Kind
from frankenstein.design.registry import get, register, verify
from frankenstein.errors import DesignError, RegistryError

from conftest import frank
from helpers_campaign import make_campaign, make_workload, write_design


@pytest.fixture
def camp(tmp_path: Path):
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl")
    yield c
    c.close()


def test_register_fixes_seed_and_schedule(camp) -> None:
    reg = register(camp, write_design(camp.root / "d.toml", blocks=6))
    assert reg.design_id == "d-1"
    assert len(reg.schedule) == 6 and all(sorted(o) == ["candidate", "served"] for o in reg.schedule)
    assert len(reg.seed) == 16
    again = get(camp, "d-1")
    assert again.schedule == reg.schedule and again.design_hash == reg.design_hash
    assert again.frozen.workload_hash and again.frozen.recipes["candidate"].parts == ["threads1"]
    assert verify(camp) and (camp.root / "designs" / "d-1.toml").exists()


def test_two_registrations_draw_different_seeds(camp) -> None:
    p = write_design(camp.root / "d.toml", blocks=8)
    a, b = register(camp, p), register(camp, p)
    assert a.design_id != b.design_id and a.seed != b.seed
    assert len(verify(camp)) == 2


def test_refuses_unreachable_alpha(camp) -> None:
    with pytest.raises(DesignError) as e:
        register(camp, write_design(camp.root / "d.toml", blocks=4))
    assert str(e.value) == (
        f"{camp.root / 'd.toml'}: blocks: 4 blocks cannot reach alpha = 0.05 under the sign rule: the smallest "
        "reachable p is 1/16 = 0.0625 (it needs at least 5 blocks)"
    )


def test_refuses_unknown_metric(camp) -> None:
    p = write_design(camp.root / "d.toml")
    p.write_text(p.read_text().replace('primary_metric = "verify_step_ms"', 'primary_metric = "speedness"'))
    with pytest.raises(DesignError, match=r"d.toml: primary_metric: unknown metric 'speedness' \(known: "):
        register(camp, p)


def test_refuses_identical_arms_outside_aa(camp) -> None:
    with pytest.raises(DesignError, match=r"d.toml: arms: the two arms are identical; only an A/A design"):
        register(camp, write_design(camp.root / "d.toml", candidate_parts="[]"))
    reg = register(camp, write_design(camp.root / "aa.toml", name="aa", kind="aa", candidate_parts="[]"))
    assert reg.design.kind == "aa"


def test_refuses_changed_workload(camp) -> None:
    p = write_design(camp.root / "d.toml", extra='workload_hash = "' + "0" * 64 + '"')
    with pytest.raises(
        DesignError, match=r"d.toml: workload_hash: workload .* no longer matches its hash \(design pins 000000000000…"
    ):
        register(camp, p)


def test_refuses_unknown_field_naming_it(camp) -> None:
    p = write_design(camp.root / "d.toml", extra="colour = 3")
    with pytest.raises(DesignError, match=r"d.toml: colour: unknown field"):
        register(camp, p)


def test_tampered_design_file_is_refused(camp) -> None:
    register(camp, write_design(camp.root / "d.toml"))
    copy = camp.root / "designs" / "d-1.toml"
    copy.write_text(copy.read_text().replace("blocks = 5", "blocks = 50"))
    with pytest.raises(
        RegistryError, match=r"d-1.toml: the registered design file was changed or removed after registration"
    ):
        verify(camp)
    with pytest.raises(RegistryError):
        get(camp, "d-1")


def test_tampered_registry_row_is_refused(camp) -> None:
    register(camp, write_design(camp.root / "d.toml"))
    register(camp, write_design(camp.root / "e.toml", name="e", blocks=6))
    # Editing the stored schedule (what a cheater would change) breaks the row hash.
    row = camp.store.query("SELECT schedule FROM registry WHERE seq = 1")[0]
    flipped = json.dumps([list(reversed(o)) for o in json.loads(row["schedule"])], separators=(",", ":"))
    with camp.store.transaction() as c:
        c.execute("UPDATE registry SET schedule = ? WHERE seq = 1", (flipped,))
    with pytest.raises(RegistryError, match=r"registry row 1 \(d-1\): the row was changed after registration"):
        verify(camp)


def test_tampered_canonical_design_and_chain(camp) -> None:
    register(camp, write_design(camp.root / "d.toml"))
    register(camp, write_design(camp.root / "e.toml", name="e", blocks=6))
    with camp.store.transaction() as c:
        c.execute("UPDATE registry SET canonical = replace(canonical, '\"blocks\":6', '\"blocks\":9') WHERE seq = 2")
    with pytest.raises(RegistryError, match=r"registry row 2 \(e-1\): the stored design does not match its hash"):
        verify(camp)
    with camp.store.transaction() as c:
        c.execute("DELETE FROM registry WHERE seq = 1")
    with pytest.raises(RegistryError, match=r"registry row 2 \(e-1\): the chain is broken"):
        verify(camp)


def test_cli_register_and_verify(camp) -> None:
    d = write_design(camp.root / "d.toml")
    r = frank("register", str(d), "-c", str(camp.root))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("registered d-1 (hash ")
    assert r.stdout.count("  block ") == 5
    v = frank("verify", "-c", str(camp.root))
    assert v.returncode == 0 and "registry verified: 1 designs" in v.stdout
    bad = frank("register", str(camp.root / "missing.toml"), "-c", str(camp.root))
    assert bad.returncode == 1
    assert bad.stderr.strip() == f"frank: error: {camp.root / 'missing.toml'}: file not found"


def test_every_design_kind_is_one_entry_of_the_table_and_implements_the_protocol() -> None:
    assert set(KINDS) == set(get_args(Kind))
    for name, kind in KINDS.items():
        assert isinstance(kind, DesignKind) and kind.name == name
    assert [n for n, k in KINDS.items() if k.adoptable] == ["speed", "screen"]
    assert [n for n, k in KINDS.items() if k.same_arms] == ["aa", "fidelity_aa"]
