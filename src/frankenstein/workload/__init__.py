"""Workloads: recorded turns (``trace``), the recording proxy (``record``), importers from other
trace formats (``importers``) and summary numbers (``stats``). Replay lives in ``replay``.

Nothing is imported here at package import time beyond the trace format, so ``import
frankenstein.workload`` stays cheap.
"""

from __future__ import annotations

from frankenstein.workload.trace import (
    RecordedOutput,
    RecordedTimings,
    ToolCall,
    Turn,
    Workload,
    append_turn,
    load_trace,
    request_bytes,
    workload_hash,
)

__all__ = [
    "RecordedOutput",
    "RecordedTimings",
    "ToolCall",
    "Turn",
    "Workload",
    "append_turn",
    "load_trace",
    "request_bytes",
    "workload_hash",
]
