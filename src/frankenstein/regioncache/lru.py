"""A thread-safe LRU map bounded by the bytes its values hold.

Each value is charged what the caller says it costs: for token ids, the bytes of the id array plus
:data:`ENTRY_OVERHEAD` for the key, the array object and the map's node (measured with
``tracemalloc`` in ``tests/test_regioncache_memory.py``), so the budget is a budget of real memory,
not a count of entries.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

ENTRY_OVERHEAD = 400


def ids_cost(ids: np.ndarray) -> int:
    return int(ids.nbytes) + ENTRY_OVERHEAD


class ByteLRU:
    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError("max_bytes must be >= 0")
        self.max_bytes = max_bytes
        self.nbytes = 0
        self.evictions = 0
        self._map: OrderedDict[bytes, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._map)

    def get_many(self, keys: list[bytes]) -> list[Any]:
        """Look up several keys at once (one lock), refreshing the ones found; None where absent."""
        out: list[Any] = []
        with self._lock:
            for key in keys:
                hit = self._map.get(key)
                if hit is not None:
                    self._map.move_to_end(key)
                    out.append(hit[0])
                else:
                    out.append(None)
        return out

    def put(self, key: bytes, value: Any, cost: int) -> None:
        """Insert, then evict least recently used entries until the budget holds. An entry larger
        than the whole budget is not stored."""
        if cost > self.max_bytes:
            return
        with self._lock:
            old = self._map.pop(key, None)
            if old is not None:
                self.nbytes -= old[1]
            self._map[key] = (value, cost)
            self.nbytes += cost
            while self.nbytes > self.max_bytes:
                _, (_, dropped) = self._map.popitem(last=False)
                self.nbytes -= dropped
                self.evictions += 1

    def clear(self) -> None:
        with self._lock:
            self._map.clear()
            self.nbytes = 0
