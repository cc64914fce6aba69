"""Requests timed by scraping ``/metrics`` right before and after each one (vLLM, SGLang)."""

from __future__ import annotations

import threading
from typing import Any

from frankenstein.engines.base import ProcessEngine
from frankenstein.engines.contract import Reply
from frankenstein.engines.prometheus import flat, merge, metrics_delta
from frankenstein.measure.timings import StepTiming


class ScrapedRequests(ProcessEngine):
    """An engine whose requests are sent between two ``/metrics`` scrapes. The deltas are the request's
    own when it was the only one in flight (else only the response's own numbers are used); the reply
    takes each timing field from the response first, then from the deltas, and both are kept in
    :attr:`last_sources`."""

    metrics_prefix = "vllm:"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.last_sources: dict[str, StepTiming] = {}
        self._lock = threading.Lock()
        self._inflight = 0
        self._sent = 0

    def scraped_timing(self, delta: dict[str, float]) -> StepTiming:
        return StepTiming()

    def request(self, path: str, body: bytes, *, turn_id: str | None = None, timeout_s: float | None = None) -> Reply:
        with self._lock:
            self._inflight += 1
            self._sent += 1
            mine, alone = self._sent, self._inflight == 1
        try:
            before = self._scrape() if alone else {}
            reply = super().request(path, body, turn_id=turn_id, timeout_s=timeout_s)
            after = self._scrape() if alone else {}
        finally:
            with self._lock:
                alone = alone and self._inflight == 1 and self._sent == mine  # none began meanwhile
                self._inflight -= 1
        own = self.step_timing(reply.body)
        scraped = (
            self.scraped_timing(metrics_delta(before, after, self.metrics_prefix)) if alone and after else StepTiming()
        )
        self.last_sources = {"per_request": own, "metrics": scraped}
        reply.timing = merge(own, scraped)
        return reply

    def _scrape(self) -> dict[str, float]:
        return flat(self.scrape())
