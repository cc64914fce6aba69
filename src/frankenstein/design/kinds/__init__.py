"""Design kinds, looked up from one table: the only place a kind's name chooses behaviour.

    kind_of(name) -> DesignKind      the kind object for a design's ``kind``
    KINDS                             {name: kind}; a new kind is one module and one line here

Each kind module implements :class:`~frankenstein.design.kinds.base.DesignKind`.
"""

from __future__ import annotations

from frankenstein.design.kinds import aa, agent, fidelity, fidelity_aa, memory, screen, speed
from frankenstein.design.kinds.base import Analysis, DesignKind, Description, Failure

KINDS: dict[str, DesignKind] = {
    k.name: k for k in (speed.KIND, fidelity.KIND, agent.KIND, screen.KIND, aa.KIND, memory.KIND, fidelity_aa.KIND)
}


def kind_of(name: str) -> DesignKind:
    """The kind object for ``name`` (the design model's ``Kind`` literal keeps unknown names out)."""
    return KINDS[name]


def timed(name: str) -> bool:
    """Whether a kind's numbers depend on time (the noise guard warns only those): fidelity and memory do not."""
    kind = kind_of(name)
    return not (kind.measures_fidelity or kind.measures_memory)


__all__ = ["KINDS", "Analysis", "DesignKind", "Description", "Failure", "kind_of", "timed"]
