"""The note's host rows: per block, which Ray node ran it (``frank run --ray``) with that host's GPU, driver
and engine binary hash, how many hosts in all, and which blocks ran on more than one host (a block resumed
after its host left the cluster), where host differences do not cancel within the block.

Nothing for a design run on one machine without Ray: its note is unchanged."""

from __future__ import annotations

from frankenstein.report.collect import DesignReport

ROWS = ("host", "host GPU", "host driver", "engine sha256")  # the block table's rows, one per HostCells field


def host_row(d: DesignReport) -> list[list[str]]:
    """The block table's host rows (one cell per block, then the mean column), or none."""
    if not d.facts.hosts:
        return []
    rows = []
    for i, label in enumerate(ROWS, start=1):
        per_block: dict[int, list[str]] = {}
        for cells in d.facts.hosts:
            seen = per_block.setdefault(cells[0], [])
            if str(cells[i]) not in seen:
                seen.append(str(cells[i]))
        distinct = {v for vs in per_block.values() for v in vs}
        last = f"{len(distinct)} in all" if i == 1 else f"{len(distinct)} distinct"
        rows.append([label, *[", ".join(per_block.get(b, [])) or "—" for b in range(d.reg.design.blocks)], last])
    return rows


def hosts(d: DesignReport) -> list[str]:
    return sorted({cells[1] for cells in d.facts.hosts})


def split_blocks(d: DesignReport) -> dict[int, list[str]]:
    """Blocks whose starts ran on more than one host, with those hosts (in record order)."""
    per_block: dict[int, list[str]] = {}
    for cells in d.facts.hosts:
        seen = per_block.setdefault(cells[0], [])
        if cells[1] not in seen:
            seen.append(cells[1])
    return {b: names for b, names in sorted(per_block.items()) if len(names) > 1}


def hosts_sentence(d: DesignReport) -> str:
    """' It ran on 3 hosts of a Ray cluster (a, b, c); ...', or nothing for a run without Ray."""
    names = hosts(d)
    if not names:
        return ""
    many = "hosts" if len(names) != 1 else "host"
    split = split_blocks(d)
    out = f" It ran on {len(names)} {many} of a Ray cluster ({', '.join(names)}), one block per host at a time"
    if not split:
        return out + ", each block's starts on one host."
    which = "; ".join(f"block {b + 1} on {len(ns)} hosts ({', '.join(ns)})" for b, ns in split.items())
    return (
        out + f". Not every block's starts ran on one host: {which} (resumed after its host left the cluster), "
        "so host differences do not cancel within those blocks."
    )
