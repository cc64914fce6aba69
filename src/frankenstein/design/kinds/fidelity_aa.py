"""A/A fidelity designs (``kind = "fidelity_aa"``): the served recipe in both arms, force-decoded, to measure
the engine's own noise floor on this machine (a new GPU, a new build): how far two starts of one recipe
differ. Every two starts, of either arm, make a pair; the analysis reports the floor as a range over those
pairs beside the registered rule's verdict (on no change it should pass: a failure says the rule trips on
noise). Never adoptable, never a fidelity gate (it tested no part)."""

from __future__ import annotations

from typing import Any

import numpy as np

from frankenstein.campaign import Campaign
from frankenstein.design.kinds.base import Analysis, Description, Evidence
from frankenstein.design.kinds.fidelity import FidelityKind, ForcedStart, analyze_starts, kept_starts
from frankenstein.design.model import Registered
from frankenstein.fidelity.compare import compare
from frankenstein.fidelity.equivalence import nats, span


def pair_means(starts: list[ForcedStart]) -> list[float]:
    """Mean KL of every two starts (either arm: both are the served recipe), in start order."""
    ordered = sorted(starts, key=lambda s: (s.block, s.arm, s.rep))
    out = []
    for i, x in enumerate(ordered):
        for y in ordered[i + 1 :]:
            kl = compare(x.result, y.result, "").stats.kl
            if len(kl):
                out.append(float(np.mean(kl)))
    return out


def floor_doc(means: list[float], starts: int) -> dict[str, Any]:
    """The noise floor over start pairs, JSON-ready: lowest, highest, mean, pairs, starts."""
    if not means:
        return {"pairs": 0, "starts": starts, "low": None, "high": None, "mean": None}
    return {
        "pairs": len(means),
        "starts": starts,
        "low": min(means),
        "high": max(means),
        "mean": sum(means) / len(means),
    }


def floor_line(doc: dict[str, Any]) -> str:
    """'noise floor (A/A): mean KL 0.0171 over 15 start pairs of 6 starts, range 0.0165–0.0178'."""
    if not doc["pairs"]:
        return f"noise floor (A/A): not measured ({doc['starts']} start(s) with forced positions; it needs two)"
    return (
        f"noise floor (A/A): mean KL {nats(doc['mean'])} over {doc['pairs']} start pairs of {doc['starts']} starts, "
        f"range {span((doc['low'], doc['high']))} (both arms are the served recipe)"
    )


class FidelityAAKind(FidelityKind):
    name = "fidelity_aa"
    same_arms = True

    def analyze(self, campaign: Campaign, evidence: Evidence) -> Analysis:
        starts, failures, notes = kept_starts(campaign, evidence)
        a = analyze_starts(evidence.reg, starts, failures, notes)
        doc = floor_doc(pair_means(starts), len(starts))
        a.lines = [floor_line(doc), *a.lines]
        if a.fidelity is not None:
            a.fidelity["aa_floor"] = doc
        return a

    def describe(self, reg: Registered) -> Description:
        return Description(
            measures="It is an A/A fidelity design: it measures how far two starts of the served recipe differ "
            "(the engine's own noise floor), not a part.",
            head=f"- Measured: per-position KL between starts of the served recipe from forced decode, "
            f"top-{reg.design.fidelity.top_k} logprobs.",
        )

    def no_decision(self, word: str) -> str:
        return "an A/A fidelity check"


KIND = FidelityAAKind()
