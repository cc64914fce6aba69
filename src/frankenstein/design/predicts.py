"""Predictions: a design (e.g. a one-GPU screen) may register the effect it predicts for a later design of the
same part, in the primary metric's own unit (``predicts = "-0.42 ms"``: candidate − served, per start).
A later design of the same part and metric then prints predicted against observed: the ratio and the
difference, e.g. "0.70 ms saved per step, 1.67 times the 0.42 ms predicted by screen-1 (0.28 ms more)".

Pure: parsing and the comparison; finding the earlier designs is :mod:`frankenstein.design.analysis`'s.

    parse_prediction(text, metric, unit) -> Prediction   ValueError naming what is wrong
    compare(prediction, design_id, observed, blocks, direction) -> PredictionCheck
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

NUMBER = re.compile(r"^\s*([+\-−]?\d+(?:\.\d+)?(?:[eE][+\-]?\d+)?)\s*([A-Za-z/]*)\s*$")


@dataclass(frozen=True)
class Prediction:
    value: float  # candidate − served, in the metric's unit
    unit: str


def parse_prediction(text: str, metric: str, want: str) -> Prediction:
    """``"-0.42 ms"`` for a metric in ``want`` = ms (its unit in the metric registry); a unit other than the
    metric's is refused (no conversion is guessed); no unit means the metric's."""
    m = NUMBER.match(text)
    if m is None:
        raise ValueError(f'{text!r} is not a number with an optional unit, e.g. "-0.42 ms"')
    value, unit = float(m.group(1).replace("−", "-")), m.group(2)
    if unit and unit != want:
        raise ValueError(f"{text!r} is in {unit!r}, but {metric} is in {want or 'no unit'}")
    if value == 0 or not math.isfinite(value):
        raise ValueError(f"{text!r}: a prediction is a non-zero finite effect (candidate − served)")
    return Prediction(value, want)


@dataclass(frozen=True)
class PredictionCheck:
    """A prediction of an earlier design against what this design observed."""

    design_id: str  # the design that predicted
    predicted: float
    observed: float  # mean over the blocks of candidate − served, in the metric's unit
    blocks: int
    unit: str
    direction: str

    @property
    def ratio(self) -> float:
        return self.observed / self.predicted

    @property
    def difference(self) -> float:
        return self.observed - self.predicted

    def sentence(self) -> str:
        """'0.70 ms saved per start, 1.67 times the 0.42 ms predicted by screen-1 (0.28 ms more; mean of 5 blocks)'."""
        u = f" {self.unit}" if self.unit else ""
        gain = (lambda x: x < 0) if self.direction == "lower" else (lambda x: x > 0)
        if gain(self.observed) and gain(self.predicted):
            word = "saved" if self.direction == "lower" else "gained"
            more = "more" if abs(self.observed) > abs(self.predicted) else "less"
            return (
                f"{abs(self.observed):.3g}{u} {word}, {self.ratio:.2f} times the {abs(self.predicted):.3g}{u} "
                f"predicted by {self.design_id} ({abs(self.difference):.3g}{u} {more}; mean of {self.blocks} blocks)"
            )
        return (
            f"observed {self.observed:+.3g}{u} (candidate − served, mean of {self.blocks} blocks) against "
            f"{self.predicted:+.3g}{u} predicted by {self.design_id}: {self.ratio:.2f} times the prediction, "
            f"{self.difference:+.3g}{u} from it"
        )


def compare(prediction: Prediction, design_id: str, observed: float, blocks: int, direction: str) -> PredictionCheck:
    return PredictionCheck(design_id, prediction.value, observed, blocks, prediction.unit, direction)
