"""Resources per start: GPU memory and power through NVML while the engine runs.

Where no GPU (or no NVML) is present, resources are recorded as *absent* — never as zero.
Sampling runs in a thread at a fixed interval; per GPU it keeps peak and mean memory used by the
engine's processes (falling back to whole-device use when per-process figures are unavailable),
and mean/max power.
"""

from __future__ import annotations

import threading
import time
from typing import Any


def _nvml() -> Any | None:
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # noqa: BLE001 - no library, no driver, no GPU: all mean "absent"
        return None


class ResourceSampler:
    def __init__(self, interval_s: float = 0.1) -> None:
        self.interval_s = interval_s
        self._nv = _nvml()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._samples: dict[int, list[tuple[float, float | None]]] = {}
        self._pid: int | None = None
        self._source = "absent"

    def start(self, pid: int | None) -> None:
        if self._nv is None:
            return
        self._pid = pid
        self._thread = threading.Thread(target=self._loop, name="nvml-sampler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        nv = self._nv
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
        while not self._stop.is_set():
            for i, h in enumerate(handles):
                self._samples.setdefault(i, []).append((self._memory(h), self._power(h)))
            self._stop.wait(self.interval_s)

    def _memory(self, h: Any) -> float:
        nv = self._nv
        try:
            procs = nv.nvmlDeviceGetComputeRunningProcesses(h)
            mine = [p.usedGpuMemory for p in procs if p.usedGpuMemory is not None and self._pid is not None and _in_tree(p.pid, self._pid)]
            if mine:
                self._source = "per-process"
                return float(sum(mine)) / 2**20
        except Exception:  # noqa: BLE001
            pass
        if self._source == "absent":
            self._source = "device"
        return float(nv.nvmlDeviceGetMemoryInfo(h).used) / 2**20

    def _power(self, h: Any) -> float | None:
        try:
            return float(self._nv.nvmlDeviceGetPowerUsage(h)) / 1000.0
        except Exception:  # noqa: BLE001
            return None

    def stop(self) -> dict[str, Any]:
        if self._thread is None:
            return {"gpu": None, "note": "absent: no GPU or NVML on this machine"}
        self._stop.set()
        self._thread.join()
        gpus = []
        for i, s in sorted(self._samples.items()):
            mem = [m for m, _ in s]
            pw = [p for _, p in s if p is not None]
            gpus.append({
                "index": i, "samples": len(s), "memory_mib_peak": max(mem), "memory_mib_mean": sum(mem) / len(mem),
                "power_w_mean": sum(pw) / len(pw) if pw else None, "power_w_max": max(pw) if pw else None,
            })
        return {"gpu": gpus, "memory_source": self._source, "interval_s": self.interval_s, "sampled_at": time.time()}


def _in_tree(pid: int, root: int) -> bool:
    """Whether ``pid`` is ``root`` or one of its descendants (engines may fork workers)."""
    seen = 0
    while pid > 1 and seen < 64:
        if pid == root:
            return True
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        seen += 1
    return False
