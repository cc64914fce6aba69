"""The recorder's writer thread (``GroupCommit``): turns fsynced in groups, off the request path, with as few
wake-ups of the thread as the delay allows; nothing left unsynced while the recorder idles, and ``close``
held by no delay. Real threads, a real trace on disk, the kernel's own counts of the thread's wake-ups."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from frankenstein.engines.response import output_from_response
from frankenstein.workload.record import TurnRecorder
from frankenstein.workload.trace import RecordedTimings, load_trace

OUTPUT = output_from_response(
    "/v1/chat/completions", {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}], "usage": {}}
)


def _turn(rec: TurnRecorder, i: int) -> None:
    body = {"messages": [{"role": "user", "content": f"turn {i}"}]}
    rec.record("/v1/chat/completions", body, "s", OUTPUT, RecordedTimings(server={}))


def _writer_since(before: set[threading.Thread]) -> threading.Thread:
    """The writer thread a recorder started after ``before`` was taken (other tests' recorders may still be
    closing theirs, under the same name)."""
    (writer,) = [t for t in threading.enumerate() if t.name == "frank-record-fsync" and t not in before]
    return writer


def _writer_switches(writer: threading.Thread) -> int:
    """Voluntary context switches of a recorder's writer thread so far (each is one sleep it woke from)."""
    status = Path(f"/proc/self/task/{writer.native_id}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("voluntary_ctxt_switches")).split()[1])


def _synced(rec: TurnRecorder, n: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while rec.syncs < n and time.monotonic() < deadline:
        threading.Event().wait(0.005)
    return rec.syncs >= n


def test_turns_one_after_another_wake_the_writer_once_per_delay_not_once_per_turn(tmp_path: Path) -> None:
    """A client's turns 5 ms apart (slower than an fsync here): 20 turns take >= 100 ms, so a 50 ms delay
    groups them into a few fsyncs, and the writer thread sleeps and wakes a few times, where waking it per turn
    made ~20 fsyncs and >= 20 wake-ups. Every turn is in the trace."""
    before = set(threading.enumerate())
    rec = TurnRecorder(tmp_path / "t.jsonl", sync_delay_s=0.05)
    _turn(rec, 0)
    assert _synced(rec, 1)
    writer = _writer_since(before)
    syncs, switches = rec.syncs, _writer_switches(writer)
    for i in range(1, 21):
        _turn(rec, i)
        threading.Event().wait(0.005)  # the client's pace: the next request comes 5 ms after this answer
    assert _synced(rec, syncs + 1)
    woken = _writer_switches(writer) - switches
    grouped = rec.syncs - syncs
    rec.close()
    assert 1 <= grouped <= 10, grouped
    assert woken <= 30, woken  # per fsync: the wake by a turn, the delay's end, the fsync's own waits
    assert [t.turn_index for t in load_trace(tmp_path / "t.jsonl").turns] == list(range(21))


def test_a_turn_is_fsynced_while_the_recorder_idles(tmp_path: Path) -> None:
    """One turn and nothing after it: the writer thread syncs it by itself, within the delay (no later turn or
    close needed), and only once."""
    rec = TurnRecorder(tmp_path / "t.jsonl", sync_delay_s=0.05)
    t0 = time.monotonic()
    _turn(rec, 0)
    assert _synced(rec, 1)
    waited = time.monotonic() - t0
    threading.Event().wait(0.2)  # four delays more: nothing new written, nothing synced again
    assert rec.syncs == 1
    rec.close()
    assert waited >= 0.05  # the thread waited for more turns before its fsync


def test_close_syncs_what_is_left_without_waiting_out_the_delay(tmp_path: Path) -> None:
    """A recorder closed right after a turn, with a delay of a minute: close returns at once, the turn synced by
    it; a turn recorded with no writer thread waiting (a second recorder on the same trace) resumes its index."""
    out = tmp_path / "t.jsonl"
    rec = TurnRecorder(out, sync_delay_s=60.0)
    _turn(rec, 0)
    t0 = time.monotonic()
    rec.close()
    assert time.monotonic() - t0 < 5.0
    assert rec.syncs == 1
    again = TurnRecorder(out, sync_delay_s=60.0)
    _turn(again, 1)
    again.close()
    assert [t.turn_index for t in load_trace(out).turns] == [0, 1]
