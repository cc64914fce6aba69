"""A/A designs: the same recipe in both arms, analysed exactly like a speed design, to measure how often
the rule fires on no change (its false-positive rate on this machine). Never adoptable."""

from __future__ import annotations

from frankenstein.design.kinds.base import Description, metric_scope
from frankenstein.design.kinds.speed import SpeedKind, metric_head
from frankenstein.design.model import Registered


class AAKind(SpeedKind):
    name = "aa"
    adoptable = False
    same_arms = True

    def describe(self, reg: Registered) -> Description:
        return Description(
            measures="It is an A/A design: it measures how often the rule fires on no change, for "
            f"{metric_scope(reg.design.primary_metric, reg.metric(reg.design.primary_metric))}.",
            head=metric_head(reg),
        )

    def went_wrong(self, word: str) -> bool:
        return word != "not confirmed"

    def no_decision(self, word: str) -> str:
        return "an A/A check"


KIND = AAKind()
