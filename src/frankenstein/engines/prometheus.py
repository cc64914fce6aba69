"""Prometheus text from an engine's ``/metrics``, and requests timed by scraping around them.

A scrape is a list of :class:`Sample` (name, labels, value), read by :func:`parse_samples`:

    samples = parse_samples('vllm:generation_tokens_total{model_name="m"} 42\\n')
    value_of(samples, "vllm:generation_tokens_total", {"model_name": "m"})   -> 42.0
    delta(before, after, "vllm:generation_tokens_total")                     -> after − before (labels summed)

``value_of`` sums the samples of one name whose labels include the given ones (none given: all of them);
``delta`` is its difference between two scrapes. The flat form ``parse_prometheus`` ({sample name with
labels: value}) and ``counter`` (a name summed over its label sets, ``_total`` tried too) serve the adapters'
per-request timing; ``metrics_delta`` is the per-name difference of two flat scrapes; ``merge`` takes timing
fields from a first source, then a second. Pure functions; the engine that scrapes around each request is
:class:`frankenstein.engines.scraped.ScrapedRequests`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from frankenstein.measure.timings import StepTiming

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|(?=\}))')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


@dataclass(frozen=True)
class Sample:
    """One line of a scrape: ``name{labels} value``."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    value: float = 0.0

    def key(self) -> str:
        """The line's text up to its value (``name{a="x",b="y"}``), the flat form's key."""
        if not self.labels:
            return self.name
        inner = ",".join(f'{k}="{_escape(v)}"' for k, v in self.labels.items())
        return f"{self.name}{{{inner}}}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _unescape(value: str) -> str:
    return re.sub(r'\\[\\"n]', lambda m: _UNESCAPE[m.group(0)], value)


def parse_sample(line: str) -> Sample | None:
    """One text-format line as a sample; None for comments, blank lines and lines that are not a sample."""
    line = line.strip()
    m = _NAME.match(line)
    if not line or line.startswith("#") or m is None:
        return None
    labels: dict[str, str] = {}
    rest = line[m.end() :]
    if rest.startswith("{"):
        pos = 1
        while not rest[pos:].lstrip().startswith("}"):
            lm = _LABEL.match(rest, pos)
            if lm is None:
                return None
            labels[lm.group(1)] = _unescape(lm.group(2))
            pos = lm.end()
        rest = rest[rest.index("}", pos) + 1 :]
    words = rest.split()
    if not words or (rest and not rest[0].isspace()):
        return None
    try:
        return Sample(m.group(0), labels, float(words[0]))
    except ValueError:
        return None


def parse_samples(text: str) -> list[Sample]:
    """Every sample of a scrape, in order (an optional timestamp after the value is ignored)."""
    return [s for s in map(parse_sample, text.splitlines()) if s is not None]


def value_of(samples: Sequence[Sample], name: str, labels: Mapping[str, str] | None = None) -> float | None:
    """The sum of ``name``'s samples whose labels include ``labels``; None when there is none."""
    want = dict(labels or {}).items()
    vals = [s.value for s in samples if s.name == name and want <= s.labels.items()]
    return float(sum(vals)) if vals else None


def delta(
    before: Sequence[Sample], after: Sequence[Sample], name: str, labels: Mapping[str, str] | None = None
) -> float | None:
    """``value_of`` after minus before (a name absent before counts 0); None when absent after."""
    a = value_of(after, name, labels)
    return None if a is None else a - (value_of(before, name, labels) or 0.0)


@dataclass(frozen=True)
class Scrapes:
    """An engine's ``/metrics`` right before and right after a start's replay (each empty when it has none),
    kept with every start as the artifact :data:`SCRAPES_ARTIFACT` (:meth:`to_json` / :meth:`from_json`)."""

    before: list[Sample] = field(default_factory=list)
    after: list[Sample] = field(default_factory=list)

    def delta(self, name: str, labels: Mapping[str, str] | None = None) -> float | None:
        return delta(self.before, self.after, name, labels)

    def flat(self) -> tuple[dict[str, float], dict[str, float]]:
        """Both scrapes as {``name{labels}``: value} (before, after)."""
        return flat(self.before), flat(self.after)

    def to_json(self) -> bytes:
        rows = {
            k: [[s.name, s.labels, s.value] for s in v] for k, v in (("before", self.before), ("after", self.after))
        }
        return json.dumps(rows, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Scrapes:
        rows: dict[str, Any] = json.loads(data)
        return cls(*([Sample(n, dict(lab), float(v)) for n, lab, v in rows.get(k, [])] for k in ("before", "after")))


SCRAPES_ARTIFACT = "metrics_scrapes.json"


def counter_deltas(scrapes: Scrapes) -> dict[str, float]:
    """{``name{labels}``: after − before} of every ``_total`` counter that moved (labels kept, one key each)."""
    before = flat(scrapes.before)
    after = {s.key(): s.value for s in scrapes.after if s.name.endswith("_total")}
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}


def flat(samples: Sequence[Sample]) -> dict[str, float]:
    """{``name{labels}``: value}: the form :func:`parse_prometheus` gives."""
    return {s.key(): s.value for s in samples}


def parse_prometheus(text: str) -> dict[str, float]:
    """A scrape as {sample name with labels: value}."""
    return flat(parse_samples(text))


def counter(m: dict[str, float], name: str) -> float | None:
    """Sum of a metric over its label sets; counters are looked up with and without ``_total``."""
    for n in (name, name + "_total") if not name.endswith(("_total", "_sum", "_count")) else (name,):
        vals = [v for k, v in m.items() if k.split("{", 1)[0] == n]
        if vals:
            return float(sum(vals))
    return None


def metrics_delta(before: dict[str, float], after: dict[str, float], prefix: str = "vllm:") -> dict[str, float]:
    """Per-name differences of an engine's counters and histogram sums/counts (labels summed)."""
    names = {k.split("{", 1)[0] for k in after if k.startswith(prefix) and not k.split("{", 1)[0].endswith("_created")}
    out = {}
    for n in names:
        a, b = counter(after, n), counter(before, n)
        if a is not None:
            out[n] = a - (b or 0.0)
    return out


def merge(first: StepTiming, second: StepTiming) -> StepTiming:
    """Field by field: ``first`` where it has a value, else ``second``."""
    a, b = first.as_dict(), second.as_dict()
    return StepTiming(**{k: a[k] if a[k] is not None else b[k] for k in a})  # type: ignore[arg-type]
