"""The prompt region cache (``cache``) and the ``frank serve`` front (``proxy``).

``RegionCache(tokenizer).count(text)`` equals ``len(tokenizer.encode(text).ids)``, computed from
cached chunks where the tokenizer's pipeline is proven to allow cuts (``pipeline``, ``cuts``).
"""

from __future__ import annotations

from frankenstein.regioncache.cache import CacheStatus, RegionCache, load_tokenizer
from frankenstein.regioncache.cuts import NEWLINE_INDENT, NEWLINE_ISOLATED, NEWLINE_NONSPACE, NewlineRule
from frankenstein.regioncache.pipeline import CutPlan, analyse, analyse_json

__all__ = [
    "NEWLINE_INDENT",
    "NEWLINE_ISOLATED",
    "NEWLINE_NONSPACE",
    "CacheStatus",
    "CutPlan",
    "NewlineRule",
    "RegionCache",
    "analyse",
    "analyse_json",
    "load_tokenizer",
]
