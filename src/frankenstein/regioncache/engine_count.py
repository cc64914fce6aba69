"""Counting through the engine's own ``/tokenize`` when no tokenizer can be built here.

``frank serve`` uses it when the model has no ``tokenizer.json`` and its GGUF tokenizer cannot be
rebuilt (:mod:`frankenstein.regioncache.gguf` says why), or when a rebuilt one disagrees with the
engine. Counts are then exactly the engine's, and the region cache is off: ``status()`` reports
``enabled = false`` with that reason, which ``frank serve`` prints when it starts.
"""

from __future__ import annotations

import threading

from frankenstein.regioncache.cache import CacheStatus
from frankenstein.regioncache.tokenize_api import TokenizeApi


class EngineCounter:
    """``encode``/``count``/``status`` like :class:`~frankenstein.regioncache.cache.RegionCache`, each
    ``encode`` one ``POST /tokenize`` to the engine, in the dialect it speaks (:mod:`.tokenize_api`;
    a failed or malformed answer is its ``TokenizeApiError``, which the front answers with a 502)."""

    def __init__(self, api: TokenizeApi, reason: str) -> None:
        self.api = api
        self.reason = f"counts come from the engine's /tokenize: {reason}"
        self._requests = 0
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return False

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        with self._lock:
            self._requests += 1
        return self.api.encode(text, add_special_tokens)

    def count(self, text: str, add_special_tokens: bool = True) -> int:
        return len(self.encode(text, add_special_tokens))

    def status(self) -> CacheStatus:
        return CacheStatus(
            enabled=False,
            reason=self.reason,
            rule=None,
            requests=self._requests,
            chunks_hit=0,
            chunks_encoded=0,
            entries=0,
            nbytes=0,
            max_bytes=0,
            evictions=0,
            shadow_checks=0,
            disabled_by_shadow=None,
        )
