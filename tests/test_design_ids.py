"""Design ids count per design name (`kvq8-fid-1` for the first design of that name, whatever was registered
before it), and ids already stored never change: a campaign registered when ids counted across the campaign
keeps its ids, verifies, and a new design skips an id that is taken."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from frankenstein.design import registry
from frankenstein.design.registry import get, next_design_id, register, verify
from frankenstein.store import RegistryRow, now_iso
from helpers_campaign import make_campaign, make_workload, write_design


@pytest.fixture
def camp(tmp_path: Path):
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl")
    yield c
    c.close()


def test_first_design_of_a_name_is_1(camp) -> None:
    ids = [
        register(camp, write_design(camp.root / f"{n}.toml", name=n)).design_id
        for n in ("threads", "kvq8-fid", "kvq8-fid", "threads", "kvq8-fid-1")
    ]
    assert ids == ["threads-1", "kvq8-fid-1", "kvq8-fid-2", "threads-2", "kvq8-fid-1-1"]
    assert get(camp, "kvq8-fid-1").design.name == "kvq8-fid"  # `frank run kvq8-fid-1` finds the first one
    assert sorted(p.name for p in (camp.root / "designs").glob("*.toml")) == sorted(f"{i}.toml" for i in ids)
    assert len(verify(camp)) == 5


def old_scheme_row(camp, design_path: Path) -> str:
    """Append a design the way registration named ids before (NAME-SEQ), through the store's one write method."""
    design = registry.load_design(design_path)
    frozen = registry.check_design(camp, design, design_path)
    source = design_path.read_bytes()
    text = registry.canonical({"frozen": frozen.model_dump(mode="json"), "source_sha256": registry.sha256(source)})
    seed, at = "ab" * 8, now_iso()
    sched = registry.canonical(registry.make_schedule(seed, design))

    def build(last: RegistryRow | None) -> RegistryRow:
        seq = (last.seq if last else 0) + 1
        prev = last.row_hash if last else registry.GENESIS
        did = f"{design.name}-{seq}"
        (camp.root / "designs" / f"{did}.toml").write_bytes(source)
        row_hash = registry._row_hash(prev, did, registry.sha256(text), seed, sched, at, "0.0.9", text)
        return RegistryRow(seq, did, design.kind, design.name, text, registry.sha256(text), seed, sched, at, "0.0.9",
                           prev, row_hash)  # fmt: skip

    return camp.store.append_registry(build).design_id


def test_ids_of_an_older_campaign_never_change(camp) -> None:
    assert register(camp, write_design(camp.root / "a.toml", name="a")).design_id == "a-1"
    old = old_scheme_row(camp, write_design(camp.root / "x.toml", name="x"))
    assert old == "x-2"  # counted across the campaign, as before
    assert len(verify(camp)) == 2  # the old id still verifies
    new = register(camp, write_design(camp.root / "x2.toml", name="x")).design_id
    assert new == "x-3"  # the second design named x would be x-2, which is taken: skipped, never reused
    assert get(camp, "x-2").seed == "ab" * 8 and json.loads(get(camp, "x-3").frozen.model_dump_json())
    assert next_design_id("x", camp.store.registry_rows()) == "x-4"
    assert len(verify(camp)) == 3
