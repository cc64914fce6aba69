"""An exact prompt region cache for HuggingFace ``tokenizers``: ``count(text)`` and ``encode(text)``
that return what a full encode returns, fast when most of the text was seen before.

A prompt is cut into content-defined chunks at cuts its tokenizer's pipeline is proven to allow
(``pipeline.py``, ``cuts.py``). Each chunk is keyed by a hash of (tokenizer, chunk bytes) and its ids
are kept in a byte-bounded LRU; only new chunks are encoded (in one batch, without special tokens),
and the post-processor's special tokens are added once around the whole text. A tokenizer whose
pipeline is not proven gets full encoding, always.

The shadow check encodes a sample of requests in full as well and compares; at the first mismatch the
cache turns itself off for good, empties its memory and says why (``status()``, a logged warning and
the ``on_disable`` callback).
"""

from __future__ import annotations

import hashlib
import logging
import random
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from frankenstein.errors import ConfigError
from frankenstein.regioncache.cuts import NewlineRule, chunk_bounds, scan
from frankenstein.regioncache.lru import ByteLRU, ids_cost
from frankenstein.regioncache.memo import Chunking, margin, memo_key, reusable_chunks
from frankenstein.regioncache.pipeline import CutPlan, analyse_json

log = logging.getLogger("frankenstein.regioncache")

DEFAULT_MAX_BYTES = 256 * 1024 * 1024
DEFAULT_TARGET_CHUNK = 2048
DEFAULT_MIN_BYTES = 4096
_PROBES = ("", "Hello world\n", "a\n\nb  c\n\tdef x(y):\n    return 1\n")


@dataclass
class CacheStatus:
    enabled: bool
    reason: str
    rule: str | None
    requests: int
    chunks_hit: int
    chunks_encoded: int
    entries: int
    nbytes: int
    max_bytes: int
    evictions: int
    shadow_checks: int
    disabled_by_shadow: str | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_tokenizer(path: str | Path) -> Tokenizer:
    """A ``tokenizer.json``; a missing or broken file is a ConfigError naming it."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("file not found", path=path)
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises plain Exception subclasses with the serde message
        raise ConfigError(f"not a tokenizer.json: {exc}", path=path) from exc


class RegionCache:
    """See the module docstring. ``cut_rule`` overrides the proven rule (negative controls only:
    an unproven rule can return wrong ids; the shadow check is the guard)."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        target_chunk: int = DEFAULT_TARGET_CHUNK,
        min_bytes: int = DEFAULT_MIN_BYTES,
        shadow_rate: float = 0.0,
        shadow_seed: int = 0,
        cut_rule: NewlineRule | None = None,
        on_disable: Callable[[str], None] | None = None,
    ) -> None:
        if not 0.0 <= shadow_rate <= 1.0:
            raise ValueError("shadow_rate must be within [0, 1]")
        self.tokenizer = tokenizer
        self.plan = self._plan(tokenizer)
        self.rule = cut_rule or self.plan.rule
        self.target_chunk = max(1, target_chunk)
        self.min_bytes = min_bytes
        self.lru = ByteLRU(max_bytes)
        self._margin = margin(self.plan.scanner.longest)
        self._shadow_rate = shadow_rate
        self._rng = random.Random(shadow_seed)
        self._on_disable = on_disable
        self._lock = threading.Lock()
        self._shadow_failure: str | None = None
        self._counts = {"requests": 0, "chunks_hit": 0, "chunks_encoded": 0, "shadow_checks": 0}
        self._encode_batch = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> RegionCache:
        return cls(load_tokenizer(path), **kwargs)

    # ------------------------------------------------------------------ public
    @property
    def enabled(self) -> bool:
        return self.rule is not None and self._shadow_failure is None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """The ids a full ``tokenizer.encode(text, add_special_tokens)`` gives."""
        body, checked = self._request(text, add_special_tokens)
        if checked is not None:
            return checked
        return self._with_specials(body, add_special_tokens)

    def count(self, text: str, add_special_tokens: bool = True) -> int:
        """``len(encode(text, add_special_tokens))``, without building the list (chunks whose ids
        were evicted but whose count is remembered are not encoded again)."""
        body, checked = self._request(text, add_special_tokens, need_ids=False)
        if checked is not None:
            return len(checked)
        n = sum(body)
        return n + (len(self.plan.prefix) + len(self.plan.suffix) if add_special_tokens else 0)

    def status(self) -> CacheStatus:
        reason = self._shadow_failure or self.plan.reason
        return CacheStatus(
            enabled=self.enabled,
            reason=reason,
            rule=self.rule.name if self.rule else None,
            entries=len(self.lru),
            nbytes=self.lru.nbytes,
            max_bytes=self.lru.max_bytes,
            evictions=self.lru.evictions,
            disabled_by_shadow=self._shadow_failure,
            **self._counts,
        )

    # ------------------------------------------------------------------ internals
    @staticmethod
    def _plan(tokenizer: Tokenizer) -> CutPlan:
        plan = analyse_json(tokenizer.to_str())
        if plan.safe and getattr(tokenizer, "encode_special_tokens", False):
            return CutPlan(
                identity=plan.identity, rule=None, reason="encode_special_tokens=True: special tokens are not split out"
            )
        if plan.safe and not _specials_agree(tokenizer, plan):
            return CutPlan(
                identity=plan.identity, rule=None, reason="post_processor: its special tokens differ from what was read"
            )
        return plan

    def _request(self, text: str, add_special: bool, need_ids: bool = True) -> tuple[list[Any], list[int] | None]:
        """The body's id arrays (or, without ``need_ids``, token counts per chunk), plus the
        full-encode ids when this request was shadow-checked or the cache is off (then the first
        part is not used)."""
        with self._lock:
            self._counts["requests"] += 1
            shadow = self.enabled and self._shadow_rate > 0 and self._rng.random() < self._shadow_rate
        if not self.enabled:
            return [], self._full(text, add_special)
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: let tokenizers say what it says about them
            return [], self._full(text, add_special)
        body = self._body(data, need_ids or shadow)
        if shadow:
            return body, self._shadow(text, add_special, body)
        return body, None

    def _full(self, text: str, add_special: bool) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=add_special).ids)

    def _body(self, data: bytes, need_ids: bool) -> list[Any]:
        """Id arrays of the chunks of ``data`` (or their token counts when ids are not needed)."""
        if len(data) < self.min_bytes:
            ids = self._encode_many([data.decode("utf-8")])[0]
            return [ids] if need_ids else [len(ids)]
        ch = self._chunking(data)
        found = self.lru.get_many(ch.keys)
        todo = [i for i, ids in enumerate(found) if ids is None and (need_ids or ch.counts[i] < 0)]
        if todo:
            fresh = self._encode_many([data[ch.bounds[i] : ch.bounds[i + 1]].decode("utf-8") for i in todo])
            for i, ids in zip(todo, fresh):
                found[i] = ids
                self.lru.put(ch.keys[i], ids, ids_cost(ids))
        counts = [len(ids) if ids is not None else n for ids, n in zip(found, ch.counts)]
        self._remember(Chunking(data, ch.bounds, ch.keys, counts))
        with self._lock:
            self._counts["chunks_hit"] += len(found) - len(todo)
            self._counts["chunks_encoded"] += len(todo)
        return found if need_ids else counts

    def _chunking(self, data: bytes) -> Chunking:
        """Bounds and keys of ``data``'s chunks, reusing the memo of an earlier prompt it extends."""
        assert self.rule is not None
        mkey = memo_key(self.plan.identity, data)
        prior = self.lru.get_many([mkey])[0] if mkey else None
        base = prior.prefix(reusable_chunks(prior, data, self._margin)) if prior else Chunking(data, [0], [], [])
        start = base.bounds[-1]
        cuts, token_starts = scan(data, self.rule, self.plan.scanner, start)
        bounds = chunk_bounds(data, cuts, self.target_chunk, start, forced=token_starts)
        ident = self.plan.identity[:32]
        keys = [hashlib.blake2b(data[a:b], digest_size=16, key=ident).digest() for a, b in zip(bounds, bounds[1:])]
        return Chunking(data, base.bounds + bounds[1:], base.keys + keys, base.counts + [-1] * len(keys))

    def _remember(self, ch: Chunking) -> None:
        mkey = memo_key(self.plan.identity, ch.data)
        if mkey is not None:
            self.lru.put(mkey, ch, ch.cost())

    def _encode_many(self, texts: list[str]) -> list[np.ndarray]:
        encs = self._encode_batch(texts, add_special_tokens=False)
        return [np.asarray(e.ids, dtype=np.uint32) for e in encs]

    def _with_specials(self, body: list[np.ndarray], add_special: bool) -> list[int]:
        ids = np.concatenate(body).tolist() if body else []
        if add_special:
            return [*self.plan.prefix, *ids, *self.plan.suffix]
        return ids

    def _shadow(self, text: str, add_special: bool, body: list[Any]) -> list[int]:
        full = self._full(text, add_special)
        cached = self._with_specials(body, add_special)
        with self._lock:
            self._counts["shadow_checks"] += 1
        if cached != full:
            self._disable(_mismatch_message(cached, full, text))
        return full

    def _disable(self, message: str) -> None:
        with self._lock:
            if self._shadow_failure is not None:
                return
            self._shadow_failure = message
        self.lru.clear()
        log.warning("region cache disabled: %s", message)
        if self._on_disable is not None:
            self._on_disable(message)


def _specials_agree(tokenizer: Tokenizer, plan: CutPlan) -> bool:
    for probe in _PROBES:
        bare = tokenizer.encode(probe, add_special_tokens=False).ids
        full = tokenizer.encode(probe, add_special_tokens=True).ids
        if list(full) != [*plan.prefix, *bare, *plan.suffix]:
            return False
    return True


def _mismatch_message(cached: list[int], full: list[int], text: str) -> str:
    at = next((i for i, (a, b) in enumerate(zip(cached, full)) if a != b), min(len(cached), len(full)))
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return (
        f"shadow check: cached ids differ from a full encode at token {at} "
        f"({len(cached)} vs {len(full)} tokens; text sha256 {digest}...)"
    )
