"""Peak resident memory (RSS) of a process tree, sampled from /proc while an engine or a command runs.

The tree is a process group (an engine or a command arm runs in its own). A thread sums ``VmRSS`` over the
group's live processes every ``interval_s``; the peak is the largest sum seen, or the largest single
process's ``VmHWM`` (its kernel-kept high-water mark) when that is larger, so a one-process engine's
peak between two samples is not missed. For several processes the figure is a lower bound of the
tree's true peak sum (two processes' peaks may fall between samples).

    sampler = RssSampler()
    sampler.start(pgid, skip="command_guard.py")   # processes whose command line holds it are left out
    ...
    record = sampler.stop()   # {"rss_mib_peak": ..., "samples": ..., "processes": ..., "interval_s": ...}

A sampler never started, or one that saw no process, gives ``{"status": "not sampled", "note": why}``:
absent is never zero.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

INTERVAL_S = 0.05
KIB_PER_MIB = 1024.0


def _status_kib(pid: int) -> tuple[float, float] | None:
    """(VmRSS, VmHWM) in KiB of one process, None when it is gone or has no memory (a kernel thread)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    found = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = float(value.split()[0])
    return (found["VmRSS"], found["VmHWM"]) if len(found) == 2 else None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            fields = (p / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(p.name))
    return out


class RssSampler:
    """Samples the summed RSS of a process group in a thread; :meth:`stop` returns the record."""

    def __init__(self, interval_s: float = INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pgid = 0
        self._skip: str | None = None
        self._peak_kib = 0.0
        self._hwm_kib = 0.0
        self._samples = 0
        self._seen: set[int] = set()

    def start(self, pgid: int | None, skip: str | None = None) -> None:
        """Begin sampling group ``pgid`` (None: nothing to sample; :meth:`stop` says so), leaving out the
        processes whose command line contains ``skip`` (a command arm's guard and its watcher)."""
        if pgid is None:
            return
        self._pgid, self._skip = pgid, skip
        self.sample()
        self._thread = threading.Thread(target=self._loop, name="frank-rss", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self) -> None:
        """One sample: the group's summed RSS now, and each process's high-water mark."""
        total, n = 0.0, 0
        for pid in members(self._pgid):
            if self._skip is not None and self._skip in _cmdline(pid):
                continue
            kib = _status_kib(pid)
            if kib is None:
                continue
            total += kib[0]
            self._hwm_kib = max(self._hwm_kib, kib[1])
            self._seen.add(pid)
            n += 1
        if n:
            self._samples += 1
            self._peak_kib = max(self._peak_kib, total)

    def stop(self) -> dict[str, Any]:
        """Stop the thread, take one last sample, and return the record."""
        if self._thread is None:
            return {"status": "not sampled", "note": "not sampled: no process to watch"}
        self._stop.set()
        self._thread.join()
        self.sample()
        if not self._samples:
            return {"status": "not sampled", "note": "not sampled: the process group had ended before a sample"}
        return {
            "rss_mib_peak": max(self._peak_kib, self._hwm_kib) / KIB_PER_MIB,
            "samples": self._samples,
            "processes": len(self._seen),
            "interval_s": self.interval_s,
            "source": "VmRSS summed over the process group, or the largest VmHWM",
        }
