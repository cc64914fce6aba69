"""Screen designs: a quick speed comparison (few blocks, often command arms) analysed like a speed design;
a confirmed screen may be adopted like a speed design."""

from __future__ import annotations

from frankenstein.design.kinds.speed import SpeedKind


class ScreenKind(SpeedKind):
    name = "screen"


KIND = ScreenKind()
