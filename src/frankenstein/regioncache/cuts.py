"""Where a UTF-8 prompt may be cut, and which of those cuts become chunk boundaries.

Pure functions over bytes (numpy for the scans, so 1 MB takes about a millisecond):

- :class:`NewlineRule` finds the newline barriers a pipeline allows (see ``pipeline.py``);
- :class:`AddedTokenScanner` finds the edges of added tokens exactly as ``tokenizers`` matches them
  (leftmost-longest, first the non-normalized tokens over the whole text, then the normalized ones
  inside the gaps) and vetoes newline cuts that fall strictly inside any occurrence of one;
- :func:`chunk_bounds` keeps a content-defined subset of the cuts as chunk boundaries: a cut is kept
  when a hash of the 16 bytes before it, scaled by the distance to the previous cut, passes a
  threshold. The decision depends on nearby bytes only, so an edit moves only nearby boundaries and
  every chunk further away keeps its bytes, its key and its cached ids.

"Whitespace" here is Python's ``str.isspace()``, a superset of Unicode White_Space (the ``\\s`` of
the regex engine inside ``tokenizers``): the rules only cut before a character that is not
whitespace under either definition.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

WINDOW = 16
_NL = 0x0A
# Bytes that can start a whitespace character (ASCII whitespace, and the lead bytes of U+0085,
# U+00A0, U+1680, U+2000-U+205F and U+3000). A candidate next to one of them is decided exactly.
_WS_LEAD = np.zeros(256, dtype=bool)
_WS_LEAD[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32, 0xC2, 0xE1, 0xE2, 0xE3]] = True
# Bytes that can end a whitespace character (ASCII whitespace and the last bytes of the others).
_WS_LAST = np.zeros(256, dtype=bool)
_WS_LAST[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = True
_WS_LAST[0x80:0xC0] = True
_HSPACE = np.zeros(256, dtype=bool)
_HSPACE[[0x09, 0x20]] = True
MAX_INDENT = 256
_MIX = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F], dtype=np.uint64)


def _char_at(data: bytes, pos: int) -> str:
    return data[pos : pos + 4].decode("utf-8", errors="ignore")[:1]


def _char_before(data: bytes, end: int) -> str:
    return data[max(0, end - 4) : end].decode("utf-8", errors="ignore")[-1:]


@dataclass(frozen=True)
class NewlineRule:
    """Cut right after a "\\n" whose next character is not whitespace. With ``indent`` the "\\n" may
    also be followed by spaces and tabs, when the first character after them is not whitespace (the
    "\\n" is then the last line break of its whitespace run). With ``isolated`` also the character
    before the "\\n" must not be whitespace (or the "\\n" starts the text)."""

    name: str
    isolated: bool = False
    indent: bool = False

    @property
    def describe(self) -> str:
        if self.isolated:
            return "after a lone '\\n' (no whitespace on either side)"
        if self.indent:
            return "after '\\n' when only spaces/tabs, then a non-whitespace character, follow"
        return "after '\\n' when the next character is not whitespace"

    def positions(self, data: bytes, arr: np.ndarray, start: int = 0) -> np.ndarray:
        """Sorted byte offsets ``c`` (start < c < len) where the rule allows a cut."""
        nl = start + np.flatnonzero(arr[start:-1] == _NL)
        first = _skip_indent(arr, nl + 1) if self.indent else nl + 1  # first byte that must be non-space
        inside = first < len(arr)
        nxt = arr[np.minimum(first, len(arr) - 1)]
        keep = inside & ~_WS_LEAD[nxt]
        for i in np.flatnonzero(inside & _WS_LEAD[nxt] & (nxt >= 0x80)).tolist():
            keep[i] = not _char_at(data, int(first[i])).isspace()
        if self.isolated:
            keep &= self._prev_ok(data, arr, nl)
        return nl[keep] + 1

    @staticmethod
    def _prev_ok(data: bytes, arr: np.ndarray, nl: np.ndarray) -> np.ndarray:
        prev = arr[np.maximum(nl - 1, 0)]
        ok = (nl == 0) | ~_WS_LAST[prev]
        for i in np.flatnonzero((nl > 0) & _WS_LAST[prev] & (prev >= 0x80)).tolist():
            ok[i] = not _char_before(data, int(nl[i])).isspace()
        return ok


def _skip_indent(arr: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """For each start, the first offset at or after it that is not a space or tab (``len(arr)`` when
    the run reaches the end or is longer than :data:`MAX_INDENT`: no cut there)."""
    n = len(arr)
    pos = pos.copy()
    active = np.flatnonzero(_HSPACE[arr[np.minimum(pos, n - 1)]] & (pos < n))
    for _ in range(MAX_INDENT):
        if active.size == 0:
            return pos
        pos[active] += 1
        active = active[pos[active] < n]
        active = active[_HSPACE[arr[pos[active]]]]
    pos[active] = n
    return pos


NEWLINE_NONSPACE = NewlineRule("newline-nonspace")
NEWLINE_INDENT = NewlineRule("newline-indent", indent=True)
NEWLINE_ISOLATED = NewlineRule("newline-isolated", isolated=True)


@dataclass(frozen=True)
class AddedTokenScanner:
    """Added tokens as ``tokenizers`` finds them; see the module docstring.

    Pass 1 (non-normalized tokens, whole text): every occurrence is found from a short literal
    *anchor* (its first two bytes, a C-speed ``bytes.find``), the longest token starting there is
    taken with one anchored regex match, and the leftmost-longest non-overlapping set is picked
    greedily. Pass 2 (normalized tokens, identity normalizer only) runs a longest-first alternation
    inside each gap, exactly like the second trie of ``tokenizers``."""

    raw: tuple[bytes, ...] = ()
    normalized: re.Pattern[bytes] | None = None
    # anchor -> anchored alternation (longest first) of the raw tokens starting with it
    groups: tuple[tuple[bytes, re.Pattern[bytes]], ...] = ()
    # (token bytes, k) for every token whose byte k-1 is "\n": a newline cut could fall inside it.
    newline_inside: tuple[tuple[bytes, int], ...] = ()
    longest: int = 0  # bytes of the longest added token

    @classmethod
    def build(cls, raw: list[str], normalized: list[str]) -> AddedTokenScanner:
        raw_b = tuple(sorted({t.encode() for t in raw if t}))
        anchors: dict[bytes, list[bytes]] = {}
        for t in raw_b:
            anchors.setdefault(t[:2], []).append(t)
        groups = tuple((a, _alternation(ts)) for a, ts in sorted(anchors.items()))
        inside = tuple(
            (t, k) for t in {x.encode() for x in raw + normalized if x} for k in range(1, len(t)) if t[k - 1] == _NL
        )
        longest = max((len(t.encode()) for t in raw + normalized), default=0)
        return cls(
            raw_b,
            _alternation([t.encode() for t in normalized if t]) if normalized else None,
            groups,
            tuple(sorted(inside)),
            longest,
        )

    @property
    def empty(self) -> bool:
        return not self.raw and self.normalized is None

    def spans(self, data: bytes, start: int = 0) -> list[tuple[int, int]]:
        """Byte spans of the added tokens that ``tokenizers`` extracts, in order, from ``start`` on
        (a safe cut: no extracted token straddles it)."""
        first = self._leftmost_longest(data, start)
        if self.normalized is None:
            return first
        out: list[tuple[int, int]] = []
        for s, e in [*first, (len(data), len(data))]:
            out += [m.span() for m in self.normalized.finditer(data, start, s)]
            if s < e:
                out.append((s, e))
            start = e
        return out

    def _leftmost_longest(self, data: bytes, start: int) -> list[tuple[int, int]]:
        found: list[tuple[int, int]] = []
        for anchor, rx in self.groups:
            i = data.find(anchor, start)
            while i >= 0:
                m = rx.match(data, i)
                if m:
                    found.append((i, -m.end()))
                i = data.find(anchor, i + 1)
        found.sort()
        out, pos = [], start
        for s, neg_end in found:
            if s >= pos:
                out.append((s, -neg_end))
                pos = -neg_end
        return out

    def edges(self, data: bytes, start: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """(every edge of an extracted token, the starts alone), sorted."""
        spans = self.spans(data, start)
        edges = np.array(sorted({p for span in spans for p in span}), dtype=np.int64)
        return edges, np.array([s for s, _ in spans], dtype=np.int64)

    def veto(self, data: bytes, cuts: np.ndarray, start: int = 0) -> np.ndarray:
        """Drop newline cuts that fall strictly inside an occurrence of an added token."""
        if not self.newline_inside or cuts.size == 0:
            return cuts
        begin = max(0, start - self.longest)
        bad = [p + k for t, k in self.newline_inside for p in _occurrences(data, t, begin)]
        return cuts[~np.isin(cuts, np.array(bad, dtype=np.int64))] if bad else cuts


def _occurrences(data: bytes, needle: bytes, begin: int = 0) -> list[int]:
    """Every start of ``needle`` in ``data`` from ``begin`` on, overlapping ones too."""
    out, i = [], data.find(needle, begin)
    while i >= 0:
        out.append(i)
        i = data.find(needle, i + 1)
    return out


def _alternation(tokens: list[bytes] | tuple[bytes, ...]) -> re.Pattern[bytes]:
    """Longest-first literals: Python's regex takes the first alternative that matches at a
    position, so at the leftmost position it takes the longest."""
    ordered = sorted(set(tokens), key=lambda b: (-len(b), b))
    return re.compile(b"|".join(re.escape(t) for t in ordered))


def scan(data: bytes, rule: NewlineRule, scanner: AddedTokenScanner, start: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(every safe cut ``c`` with start < c < len, the added-token starts among them), sorted. A
    non-zero ``start`` must itself be a safe cut: scanning resumes there and finds what a scan from
    0 would find after it."""
    arr = np.frombuffer(data, dtype=np.uint8)
    empty = np.empty(0, np.int64)
    if len(data) - start < 2:
        return empty, empty
    cuts = scanner.veto(data, rule.positions(data, arr, start), start)
    starts = empty
    if not scanner.empty:
        edges, starts = scanner.edges(data, start)
        cuts = _merge(cuts, edges)
        starts = starts[(starts > start) & (starts < len(data))]
    return cuts[(cuts > start) & (cuts < len(data))], starts


def candidate_cuts(data: bytes, rule: NewlineRule, scanner: AddedTokenScanner, start: int = 0) -> np.ndarray:
    """Every safe cut ``c`` with start < c < len (sorted); see :func:`scan`."""
    return scan(data, rule, scanner, start)[0]


def _merge(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sorted union of two sorted arrays (np.union1d hashes; this only sorts)."""
    c = np.concatenate([a, b])
    c.sort(kind="stable")
    return c[np.concatenate(([True], c[1:] != c[:-1]))] if c.size else c


def chunk_bounds(
    data: bytes, cuts: np.ndarray, target: int, start: int = 0, forced: np.ndarray | None = None
) -> list[int]:
    """Chunk boundaries ``[start, ..., len(data)]`` chosen among ``cuts`` (all > start; ``start`` is a
    cut or 0) by content (module docstring).

    A cut at distance ``gap`` from the previous cut is kept with probability ``min(1, gap/target)``
    over the hash of its window, so chunks average ``target`` bytes whatever the density of cuts;
    ``target=1`` keeps every cut. Cuts in ``forced`` (the starts of added tokens: where chat
    messages begin) are always kept, so a new message never shares a chunk with the one before."""
    if cuts.size == 0:
        return [start, len(data)]
    arr = np.frombuffer(data, np.uint8)
    idx = cuts[:, None] + np.arange(-WINDOW, 0)  # bytes [c-16, c) of each cut
    windows = np.where(idx >= 0, arr[np.maximum(idx, 0)], 0).astype(np.uint8)
    words = np.ascontiguousarray(windows).view(np.uint64)  # two 64-bit words per cut
    with np.errstate(over="ignore"):
        h = words[:, 0] * _MIX[0] ^ words[:, 1] * _MIX[1]
        h ^= h >> np.uint64(31)
        h *= _MIX[0]
    h32 = (h >> np.uint64(32)).astype(np.float64)
    gap = np.diff(cuts, prepend=start).astype(np.float64)
    keep = h32 * float(target) < gap * 4294967296.0
    if forced is not None and forced.size:
        keep |= np.isin(cuts, forced)
    return [start, *cuts[keep].tolist(), len(data)]
