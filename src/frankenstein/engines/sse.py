"""One server-sent-events parser for engines (:mod:`.stream`) and the recording proxy
(:mod:`frankenstein.workload.record`): bytes in as they arrive, events out.

Only the partial last line is buffered, never the raw stream. Each ``data:`` line is one event:
a JSON object, the ``[DONE]`` marker, or malformed (kept as its first bytes, for the message).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class SseEvent:
    data: dict[str, Any] | None = None
    done: bool = False
    malformed: bytes | None = None


@dataclass
class SseParser:
    _buf: bytearray = field(default_factory=bytearray)

    @property
    def pending(self) -> int:
        """Bytes held: the partial last line only."""
        return len(self._buf)

    def feed(self, data: bytes) -> Iterator[SseEvent]:
        """The events completed by ``data`` (a ``data:`` line ends at its newline)."""
        self._buf += data
        while (nl := self._buf.find(b"\n")) >= 0:
            line = bytes(self._buf[:nl]).rstrip(b"\r")
            del self._buf[: nl + 1]
            event = parse_line(line)
            if event is not None:
                yield event


def parse_line(line: bytes) -> SseEvent | None:
    """One line of an event stream; None for lines that carry no data (comments, ``event:``, blank)."""
    if not line.startswith(b"data:"):
        return None
    payload = line[5:].strip()
    if payload == b"[DONE]":
        return SseEvent(done=True)
    try:
        value = json.loads(payload)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return SseEvent(malformed=payload[:80])
    return SseEvent(data=value) if isinstance(value, dict) else None
