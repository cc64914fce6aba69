"""Prefetch the next start's files: while a start replays, read the next start's model files into the
OS page cache, so no start pays cold disk reads that the other arm did not.

The files of a start are its recipe's model (a llama.cpp GGUF, or every file of a local vLLM/SGLang
model folder) and its draft model files. Only files the current start does not itself read are
read, and only when their size fits in half of ``MemAvailable`` (read from ``/proc/meminfo`` at the
moment the read begins): otherwise the prefetch is skipped and the reason recorded. The read begins
when the current start is ready (its own model is loaded by then) in one background thread of
sequential 4 MiB reads, and stops at the end of the start whether done or not.

The start's record holds what happened (``resources["prefetch"]``): the next start it was for, files,
bytes read of bytes wanted, seconds, the share of those files' pages in the page cache before and
after (``mincore``), and ``skipped`` (why nothing was read: already cached, too large, same files) or
``stopped`` (the start ended first). Every start also records how much of its own model files was in
the page cache when it launched (``resources["page_cache"]``): a start that paid cold disk reads says so.

    files_of(recipe) -> list[Path]
    next_slot(reg, slot) -> Slot | None
    mem_available() -> int | None
    resident_share(paths) -> float | None   share of the files' pages in the page cache
    Prefetch(paths, label)             begin() in a thread, finish() -> the record
    ahead(campaign, reg, slot)         the context the runner wraps a slot in (via caches.around_slot)
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from frankenstein.campaign import Campaign
from frankenstein.config import ResolvedRecipe
from frankenstein.design import phases
from frankenstein.design.model import Registered, Slot
from frankenstein.design.pins import model_files

CHUNK = 4 << 20
MEMORY_SHARE = 0.5  # at most this share of MemAvailable is read ahead


def files_of(recipe: ResolvedRecipe | None) -> list[Path]:
    """The files a start of ``recipe`` reads at load (:func:`frankenstein.design.pins.model_files`: its model
    file or model folder, and its draft model files). A user command or a command arm reads nothing we can name."""
    if recipe is None or recipe.command:
        return []
    return [path for _, path in model_files(recipe)]


def next_slot(reg: Registered, slot: Slot) -> Slot | None:
    slots = reg.slots()
    i = slots.index(slot) if slot in slots else -1
    return slots[i + 1] if 0 <= i < len(slots) - 1 else None


def mem_available() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes; None where it cannot be read."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


_libc: ctypes.CDLL | None = None


def _mincore_lib() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        lib = ctypes.CDLL("libc.so.6", use_errno=True)
        lib.mmap.restype = ctypes.c_void_p
        lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        _libc = lib
    return _libc


def resident_share(paths: Sequence[Path]) -> float | None:
    """The share of the files' pages now in the OS page cache (``mincore`` of a read-only mapping, which
    reads nothing); None where it cannot be told (not Linux, a file that cannot be mapped)."""
    try:
        lib = _mincore_lib()
    except OSError:
        return None
    pages = resident = 0
    for path in paths:
        try:
            size = path.stat().st_size
            if size == 0:
                continue
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        try:
            addr = lib.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if addr in (None, ctypes.c_void_p(-1).value):
                return None
            n = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
            vec = (ctypes.c_ubyte * n)()
            ok = lib.mincore(addr, size, vec) == 0
            lib.munmap(addr, size)
            if not ok:
                return None
            pages += n
            resident += int((np.frombuffer(memoryview(vec), dtype=np.uint8) & 1).sum())
        finally:
            os.close(fd)
    return resident / pages if pages else None


class Prefetch:
    """Read ``paths`` in a background thread from :meth:`begin` until done or :meth:`finish`."""

    def __init__(self, paths: list[Path], label: str, skipped: str | None = None) -> None:
        self.paths = paths
        self.record: dict[str, Any] = {
            "for": label,
            "files": len(paths),
            "bytes_wanted": sum(_size(p) for p in paths),
            "bytes": 0,
            "seconds": 0.0,
            "skipped": skipped,
        }
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def begin(self) -> None:
        if self.record["skipped"] or self._thread is not None:
            return
        avail = mem_available()
        wanted = int(self.record["bytes_wanted"])
        if avail is None:
            self.record["skipped"] = "MemAvailable could not be read"
            return
        self.record["mem_available"] = avail
        before = resident_share(self.paths)
        self.record["resident_before"] = before
        if before is not None and before >= 0.999:
            self.record["skipped"] = "already in the page cache"
            return
        if wanted > MEMORY_SHARE * avail:
            self.record["skipped"] = (
                f"{wanted / 2**30:.2f} GiB to read is more than {MEMORY_SHARE:.0%} of MemAvailable "
                f"({avail / 2**30:.2f} GiB)"
            )
            return
        self._thread = threading.Thread(target=self._read, name="frank-prefetch", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        t0 = time.monotonic()
        buf = bytearray(CHUNK)
        done = 0
        try:
            for path in self.paths:
                with open(path, "rb", buffering=0) as f:
                    while not self._stop.is_set():
                        n = f.readinto(buf)
                        if not n:
                            break
                        done += n
                if self._stop.is_set():
                    break
        except OSError as exc:
            self.record["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            self.record["bytes"] = done
            self.record["seconds"] = round(time.monotonic() - t0, 4)

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait for the read to end by itself; True when it has (or never began)."""
        if self._thread is not None:
            self._thread.join(timeout_s)
            return not self._thread.is_alive()
        return True

    def finish(self) -> dict[str, Any]:
        """Stop reading (the start is over) and return the record (the same record when called again)."""
        if "stopped" in self.record:
            return dict(self.record)
        if self._thread is not None:
            stopped = self._thread.is_alive()
            self._stop.set()
            self._thread.join()
            self.record["stopped"] = stopped
            self.record["resident_after"] = resident_share(self.paths)
        elif not self.record["skipped"]:
            self.record["skipped"] = "the start never became ready"
        return dict(self.record)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def plan(reg: Registered, slot: Slot) -> Prefetch | None:
    """The prefetch to run during ``slot`` (for the slot after it), or None at the last slot."""
    nxt = next_slot(reg, slot)
    if nxt is None:
        return None
    label = f"block {nxt.block + 1}, {nxt.arm} (position {nxt.position}, rep {nxt.rep})"
    if reg.design.arms[nxt.arm].command is not None:
        return Prefetch([], label, "the next start is a command arm: no model files")
    if reg.design.arms[slot.arm].command is not None:
        return Prefetch([], label, "this start is a command arm: no ready point to begin at")
    mine = set(files_of(reg.frozen.recipes.get(slot.arm)))
    theirs = files_of(reg.frozen.recipes.get(nxt.arm))
    if not theirs:
        return Prefetch([], label, "the next start's recipe names no local model file or folder")
    todo = [p for p in theirs if p not in mine]
    if not todo:
        return Prefetch([], label, "the next start reads the same files as this one")
    return Prefetch(todo, label)


@contextmanager
def ahead(campaign: Campaign, reg: Registered, slot: Slot) -> Iterator[Prefetch | None]:
    """During the slot's start: when it is ready (phase ``ready`` ends), begin reading the next start's
    files; the record is attached to the start (``resources["prefetch"]``). Outside a phase recorder
    nothing is read (there is no ready point to begin at)."""
    job = plan(reg, slot)
    rec = phases.current()
    if rec is not None:
        own = files_of(reg.frozen.recipes.get(slot.arm))
        if own:
            at_launch = {"files": len(own), "bytes": sum(_size(p) for p in own), "resident": resident_share(own)}
            rec.attach("page_cache", lambda: at_launch)
    if job is not None and rec is not None:
        rec.after("ready", job.begin)
        rec.attach("prefetch", job.finish)
    try:
        yield job
    finally:
        if job is not None:
            job.finish()
