"""The note's host row: which Ray node ran each block (``frank run --ray``), and how many hosts in all.

Nothing for a design run on one machine without Ray: its note is unchanged."""

from __future__ import annotations

from frankenstein.report.collect import DesignReport


def host_row(d: DesignReport) -> list[list[str]]:
    """The block table's ``host`` row (one cell per block, then the mean column), or no row."""
    if not d.facts.hosts:
        return []
    per_block: dict[int, list[str]] = {}
    for block, node in d.facts.hosts:
        if node not in per_block.setdefault(block, []):
            per_block[block].append(node)
    cells = [", ".join(per_block.get(b, [])) or "—" for b in range(d.reg.design.blocks)]
    return [["host", *cells, f"{len(hosts(d))} in all"]]


def hosts(d: DesignReport) -> list[str]:
    return sorted({node for _, node in d.facts.hosts})


def hosts_sentence(d: DesignReport) -> str:
    """' It ran on 3 hosts of a Ray cluster (a, b, c); ...', or nothing for a run without Ray."""
    names = hosts(d)
    if not names:
        return ""
    many = "hosts" if len(names) != 1 else "host"
    return (
        f" It ran on {len(names)} {many} of a Ray cluster ({', '.join(names)}), one block per host at a time, "
        "each block's starts on one host."
    )
