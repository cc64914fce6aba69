"""User metrics: ``[metrics.NAME]`` in frank.toml, registered and analysed like the built-in ones.

A campaign measures what its parts change. Three sources, each declared with its unit and better direction:

```toml
[metrics.time_per_job_ms]          # printed by a command arm: {"time_per_job_ms": 41.2}
unit = "ms"
direction = "lower"
source = "command"

[metrics.tokens_per_decode]        # an engine's /metrics: the difference between the scrapes around the
unit = "tokens"                    # replay, optionally divided by another counter's
direction = "higher"
source = "engine"
counter = "llamacpp:tokens_predicted_total"
per = "llamacpp:n_decode_total"

[metrics.queue_free_ms]            # derived from stored turn fields: per turn, then Σ / turns
unit = "ms"
direction = "lower"
source = "turns"
value = "ttft_ms - prompt_ms"
```

``labels`` (and ``per_labels``) select the samples of a counter or histogram series whose labels include
them (all samples are summed when none are given). A start folds a ``turns`` metric as the built-in
per-turn means are folded (Σ per-turn value / turns; none when a measured turn lacks a field), an
``engine`` metric as Δcounter / Δper (none when a series is absent), and a ``command`` metric is the
number the arm printed (fold ``last``).

    UserMetric         one declaration (pydantic, ``extra="forbid"``; ``source`` chooses the fields)
    as_metric(n, u)    the registry's :class:`~frankenstein.measure.metrics.Metric` for it
    known(declared)    {name: Metric}: the built-in metrics and these user metrics
    start_values(...)  a start's values of the ``turns`` and ``engine`` metrics
    turn_value(...)    one turn's value of a ``turns`` metric
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field

from frankenstein.measure.metrics import BUILTIN, Metric, Need
from frankenstein.measure.timings import RAW_SUMS, StepTiming
from frankenstein.validation import FrozenUserFile

TURN_FIELDS = (*StepTiming.__dataclass_fields__, "ttft_ms", "e2e_ms", "pre_ms", "post_ms")
"""The per-turn fields a ``turns`` metric can use (a replay row's numbers)."""
STREAM_FIELDS = ("ttft_ms", "pre_ms", "post_ms")
TIMING_FIELDS = ("prompt_ms", "decode_ms", "target_steps", "pre_ms", "post_ms")
_OPS = {ast.Add: float.__add__, ast.Sub: float.__sub__, ast.Mult: float.__mul__, ast.Div: float.__truediv__}
METRIC_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
SERIES = r"^[a-zA-Z_:][a-zA-Z0-9_:]{0,199}$"  # a Prometheus metric name


def _expression(text: str) -> str:
    """``value`` of a ``turns`` metric: numbers, turn fields, + − × ÷ and parentheses, nothing else."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"{text!r} is not an expression: {exc.msg}") from exc
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id not in TURN_FIELDS:
            raise ValueError(f"{node.id!r} is not a turn field (known: {', '.join(TURN_FIELDS)})")
        allowed = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.USub, ast.UAdd, ast.Name, ast.Load, *_OPS)
        if not isinstance(node, allowed) and not _is_number(node):
            raise ValueError(f"{text!r}: only numbers, turn fields, + - * / and parentheses are allowed")
    return text


def _is_number(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


class _Common(FrozenUserFile):
    unit: str = Field(min_length=1, max_length=32)
    direction: Literal["lower", "higher"]
    description: str = ""
    signed: bool = False  # can be zero or negative: a rule that tests ratios refuses it as the primary metric


class CommandMetric(_Common):
    source: Literal["command"]


class EngineMetric(_Common):
    source: Literal["engine"]
    counter: str = Field(pattern=SERIES)
    labels: dict[str, str] = Field(default_factory=dict)
    per: str | None = Field(default=None, pattern=SERIES)
    per_labels: dict[str, str] = Field(default_factory=dict)


class TurnMetric(_Common):
    source: Literal["turns"]
    value: Annotated[str, AfterValidator(_expression)]


Declared = CommandMetric | EngineMetric | TurnMetric
UserMetric = Annotated[Declared, Field(discriminator="source")]


def check_metric_name(name: str) -> str:
    """A user metric's name: a slug that names no built-in metric and no sum a start stores."""
    if not METRIC_NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a metric name: lowercase letters, digits and '_', starting with a letter")
    if name in BUILTIN or name in RAW_SUMS:
        raise ValueError(f"{name!r} is a metric frank already defines; choose another name")
    return name


def as_metric(name: str, m: Declared) -> Metric:
    """The registry's view of a user metric."""
    meaning = m.description or _source_words(m)
    if isinstance(m, CommandMetric):
        return Metric(name, m.unit, m.direction, "start", meaning, ("command",), m.signed, fold="last")
    if isinstance(m, EngineMetric):
        return Metric(name, m.unit, m.direction, "start", meaning, ("engine_metrics",), m.signed, fold="last")
    return Metric(name, m.unit, m.direction, "request", meaning, _turn_needs(m.value), m.signed, fold="mean")


def known(declared: Mapping[str, Declared]) -> dict[str, Metric]:
    """The built-in metrics and the declared user metrics, by name."""
    return {**BUILTIN, **{n: as_metric(n, m) for n, m in declared.items()}}


def _turn_needs(value: str) -> tuple[Need, ...]:
    used = {n.id for n in ast.walk(ast.parse(value, mode="eval")) if isinstance(n, ast.Name)}
    needs: list[Need] = []
    if used & set(STREAM_FIELDS):
        needs.append("stream")
    if used & set(TIMING_FIELDS):
        needs.append("server_timings")
    return tuple(needs)


def _source_words(m: Declared) -> str:
    if isinstance(m, CommandMetric):
        return "printed by a command arm"
    if isinstance(m, EngineMetric):
        per = f" / Δ {m.per}" if m.per else ""
        return f"Δ {m.counter}{per} over the replay, from the engine's /metrics"
    return f"{m.value} per turn"


# ---------------------------------------------------------------- a start's values


def turn_value(value: str, turn: Mapping[str, Any]) -> float | None:
    """One turn's value of a ``turns`` metric; None when a field it uses is missing, or on division by zero."""
    return _eval(ast.parse(value, mode="eval").body, turn)


def _eval(node: ast.expr, turn: Mapping[str, Any]) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.Name):
        v = turn.get(node.id)
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else None
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, turn)
        return None if v is None else (-v if isinstance(node.op, ast.USub) else v)
    assert isinstance(node, ast.BinOp)
    a, b = _eval(node.left, turn), _eval(node.right, turn)
    if a is None or b is None or (isinstance(node.op, ast.Div) and b == 0):
        return None
    return _OPS[type(node.op)](a, b)


def _turns_value(value: str, turns: Sequence[Mapping[str, Any]]) -> float | None:
    measured = [t for t in turns if not t.get("warmup") and not t.get("error")]
    vals = [turn_value(value, t) for t in measured]
    if not vals or any(v is None for v in vals):
        return None
    return sum(v for v in vals if v is not None) / len(vals)


def series(scrape: Mapping[str, float], name: str, labels: Mapping[str, str]) -> float | None:
    """Σ of the samples of ``name`` whose labels include ``labels`` (a parsed ``/metrics``: {sample: value})."""
    vals = [v for k, v in scrape.items() if _sample_name(k) == name and labels.items() <= _labels(k).items()]
    return float(sum(vals)) if vals else None


def _sample_name(key: str) -> str:
    return key.split("{", 1)[0]


_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def _labels(key: str) -> dict[str, str]:
    return dict(_LABEL.findall(key.partition("{")[2]))


def _delta(
    before: Mapping[str, float], after: Mapping[str, float], name: str, labels: Mapping[str, str]
) -> float | None:
    a, b = series(after, name, labels), series(before, name, labels)
    return None if a is None or b is None or a < b else a - b  # a counter that went down: the engine restarted


def _engine_value(m: EngineMetric, before: Mapping[str, float], after: Mapping[str, float]) -> float | None:
    top = _delta(before, after, m.counter, m.labels)
    if m.per is None or top is None:
        return top
    bottom = _delta(before, after, m.per, m.per_labels)
    return None if not bottom else top / bottom


def start_values(
    declared: Mapping[str, Declared],
    turns: Sequence[Mapping[str, Any]],
    before: Mapping[str, float],
    after: Mapping[str, float],
) -> dict[str, float | None]:
    """A start's value of each ``turns`` and ``engine`` metric (a ``command`` metric is what the arm printed)."""
    out: dict[str, float | None] = {}
    for name, m in declared.items():
        if isinstance(m, TurnMetric):
            out[name] = _turns_value(m.value, turns)
        elif isinstance(m, EngineMetric):
            out[name] = _engine_value(m, before, after)
    return out
