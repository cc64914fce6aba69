"""A thread-safe LRU map from chunk key to token ids, bounded by the bytes it holds.

Each entry is charged the bytes of its id array plus :data:`ENTRY_OVERHEAD` for the key, the array
object and the map's node (measured with ``tracemalloc`` in ``tests/test_regioncache_memory.py``), so
the budget is a budget of real memory, not a count of entries.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

ENTRY_OVERHEAD = 320


class ByteLRU:
    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError("max_bytes must be >= 0")
        self.max_bytes = max_bytes
        self.nbytes = 0
        self.evictions = 0
        self._map: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def cost(ids: np.ndarray) -> int:
        return int(ids.nbytes) + ENTRY_OVERHEAD

    def __len__(self) -> int:
        return len(self._map)

    def get_many(self, keys: list[bytes]) -> list[np.ndarray | None]:
        """Look up several keys at once (one lock), refreshing the ones found."""
        out: list[np.ndarray | None] = []
        with self._lock:
            for key in keys:
                ids = self._map.get(key)
                if ids is not None:
                    self._map.move_to_end(key)
                out.append(ids)
        return out

    def put(self, key: bytes, ids: np.ndarray) -> None:
        """Insert, then evict least recently used entries until the budget holds. An entry larger
        than the whole budget is not stored."""
        cost = self.cost(ids)
        if cost > self.max_bytes:
            return
        with self._lock:
            old = self._map.pop(key, None)
            if old is not None:
                self.nbytes -= self.cost(old)
            self._map[key] = ids
            self.nbytes += cost
            while self.nbytes > self.max_bytes:
                _, dropped = self._map.popitem(last=False)
                self.nbytes -= self.cost(dropped)
                self.evictions += 1

    def clear(self) -> None:
        with self._lock:
            self._map.clear()
            self.nbytes = 0
