"""The chunking of recent prompts, so a prompt that extends (or edits late in) one is scanned only
after the part they share.

Agent clients resend the previous prompt plus a new turn. Whether a byte offset ``b`` is a chunk
boundary depends only on the bytes before ``b`` and at most :func:`margin` bytes after it (the
indentation run a newline cut looks across, the longest added token, the CDC window). So a boundary
of an earlier prompt that lies at least ``margin`` bytes inside the prefix both prompts share is a
boundary of the new prompt too, with the same chunks before it: those chunks, their keys and token
counts are taken from the memo, and scanning resumes at that boundary.
"""

from __future__ import annotations

import bisect
import hashlib
from dataclasses import dataclass

from frankenstein.regioncache.cuts import MAX_INDENT, WINDOW
from frankenstein.regioncache.lru import ENTRY_OVERHEAD

HEAD = 4096  # prompts are filed under a hash of their first HEAD bytes
PER_CHUNK = 120  # bytes a chunk costs in a memo: its key, its bound, its count, list slots


def margin(longest_added_token: int) -> int:
    return MAX_INDENT + 8 + longest_added_token + WINDOW


@dataclass(frozen=True)
class Chunking:
    """A prompt's chunks: ``bounds[i]:bounds[i+1]`` is chunk ``i``; ``counts[i]`` its number of
    tokens, or -1 when not known yet."""

    data: bytes
    bounds: list[int]
    keys: list[bytes]
    counts: list[int]

    def cost(self) -> int:
        return len(self.data) + PER_CHUNK * len(self.keys) + ENTRY_OVERHEAD

    def prefix(self, n_chunks: int) -> Chunking:
        return Chunking(self.data, self.bounds[: n_chunks + 1], self.keys[:n_chunks], self.counts[:n_chunks])


def memo_key(identity: bytes, data: bytes) -> bytes | None:
    if len(data) < HEAD:
        return None
    return b"memo:" + hashlib.blake2b(data[:HEAD], digest_size=16, key=identity[:32]).digest()


def reusable_chunks(old: Chunking, data: bytes, margin_bytes: int) -> int:
    """How many leading chunks of ``old`` are chunks of ``data`` too (see the module docstring)."""
    view = memoryview(old.data)
    if data.startswith(view):
        shared = len(old.data)
    else:  # the longest boundary-aligned common prefix, by bisection over the bounds
        lo, hi = 0, len(old.bounds) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if data.startswith(view[: old.bounds[mid]]):
                lo = mid
            else:
                hi = mid - 1
        shared = old.bounds[lo]
    limit = min(shared, len(data)) - margin_bytes
    return max(0, bisect.bisect_right(old.bounds, limit) - 1)
