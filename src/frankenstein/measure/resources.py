"""Resources per start: GPU memory, power, clocks, temperature and throttle reasons through NVML.

Any start kind (speed, fidelity, agent, screen) wraps its engine's life in the sampler::

    with ResourceSampler() as sampler:
        engine.start()
        sampler.attach(engine_pid)      # per-process memory from here on
        ...                             # replay, forced decode, agent episodes
    resources = sampler.result

Where nothing could be measured the result says which of two things is true, never zero:
``status = "no GPU"`` (NVML sees no device, or there is no NVIDIA device node) or
``status = "not sampled"`` (pynvml missing, NVML failing, or never started), with the reason in ``note``.
``not_sampled(reason)`` is the honest record for a start that did not run the sampler at all.

Sampling runs in a thread at a fixed interval; per GPU it keeps peak and mean memory used by the
engine's processes (falling back to whole-device use when per-process figures are unavailable),
mean/max power, the SM clock range, the peak temperature and every throttle reason seen.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Any

from frankenstein.measure.machine import has_nvidia_device, nvml, throttle_names


def not_sampled(reason: str) -> dict[str, Any]:
    """The resources record of a start that did not sample (distinct from "no GPU")."""
    return {"gpu": None, "status": "not sampled", "note": f"not sampled: {reason}"}


class _Series:
    """Per-GPU accumulator."""

    def __init__(self) -> None:
        self.mem: list[float] = []
        self.power: list[float] = []
        self.sm: list[int] = []
        self.temp: list[int] = []
        self.reasons: set[str] = set()

    def summary(self, index: int) -> dict[str, Any]:
        mem, pw = self.mem, self.power
        return {
            "index": index,
            "samples": len(mem),
            "memory_mib_peak": max(mem),
            "memory_mib_mean": sum(mem) / len(mem),
            "power_w_mean": sum(pw) / len(pw) if pw else None,
            "power_w_max": max(pw) if pw else None,
            "sm_clock_mhz_min": min(self.sm) if self.sm else None,
            "sm_clock_mhz_max": max(self.sm) if self.sm else None,
            "temperature_c_max": max(self.temp) if self.temp else None,
            "throttle_reasons": sorted(self.reasons),
        }


class ResourceSampler:
    def __init__(self, interval_s: float = 0.1) -> None:
        self.interval_s = interval_s
        nv, self._why = nvml()
        self._nv: Any = nv
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._series: dict[int, _Series] = {}
        self._pid: int | None = None
        self._source = "absent"
        self._await_pid = False
        self.result: dict[str, Any] | None = None

    # -- context manager: sample from entry; attach the engine's pid once it exists --------------
    def __enter__(self) -> ResourceSampler:
        self._await_pid = True  # no samples until attach(): the engine's load is what we measure
        self.start(None)
        return self

    def attach(self, pid: int | None) -> None:
        """Start sampling, counting the memory of ``pid``'s process tree (whole-device use if None)."""
        self._pid = pid
        self._await_pid = False

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.result = self.stop()

    # -- the older two-call form, kept for callers that start sampling after the engine is up -------
    def start(self, pid: int | None) -> None:
        if self._nv is None or self._thread is not None:
            self._pid = pid if pid is not None else self._pid
            return
        self._pid = pid
        self._thread = threading.Thread(target=self._loop, name="nvml-sampler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            if not self._await_pid:
                self._sample_once()
            self._stop.wait(self.interval_s)

    def _sample_once(self) -> None:
        nv = self._nv
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            s = self._series.setdefault(i, _Series())
            s.mem.append(self._memory(h))
            power = self._power(h)
            sm = self._read(nv.nvmlDeviceGetClockInfo, h, 1)  # NVML_CLOCK_SM
            temp = self._read(nv.nvmlDeviceGetTemperature, h, 0)  # NVML_TEMPERATURE_GPU
            if power is not None:
                s.power.append(power)
            if sm is not None:
                s.sm.append(int(sm))
            if temp is not None:
                s.temp.append(int(temp))
            mask = self._reasons(h)
            if mask is not None:
                s.reasons.update(r for r in throttle_names(mask) if r != "gpu_idle")

    def _memory(self, h: Any) -> float:
        nv = self._nv
        try:
            procs = nv.nvmlDeviceGetComputeRunningProcesses(h)
            mine = [
                p.usedGpuMemory
                for p in procs
                if p.usedGpuMemory is not None and self._pid is not None and _in_tree(p.pid, self._pid)
            ]
            if mine:
                self._source = "per-process"
                return float(sum(mine)) / 2**20
        except Exception:  # noqa: BLE001
            pass
        if self._source == "absent":
            self._source = "device"
        return float(nv.nvmlDeviceGetMemoryInfo(h).used) / 2**20

    def _power(self, h: Any) -> float | None:
        v = self._read(self._nv.nvmlDeviceGetPowerUsage, h)
        return None if v is None else float(v) / 1000.0

    def _reasons(self, h: Any) -> int | None:
        nv = self._nv
        fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        return None if fn is None else self._read(fn, h)

    @staticmethod
    def _read(fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception:  # noqa: BLE001 - NVMLError_NotSupported per field
            return None

    def stop(self) -> dict[str, Any]:
        if self._thread is None:
            if self._nv is None and not has_nvidia_device():
                return {"gpu": None, "status": "no GPU", "note": "no GPU: no NVIDIA device node or driver"}
            if self._nv is None:
                return not_sampled(self._why)
            return not_sampled("the sampler was never started")
        self._stop.set()
        self._thread.join()
        if not self._await_pid and not any(s.mem for s in self._series.values()):
            self._sample_once()  # a start shorter than one interval still gets its sample
        gpus = [s.summary(i) for i, s in sorted(self._series.items()) if s.mem]
        if not gpus:
            return {"gpu": None, "status": "no GPU", "note": "no GPU: NVML sees no devices"}
        return {
            "gpu": gpus,
            "status": "sampled",
            "memory_source": self._source,
            "interval_s": self.interval_s,
            "sampled_at": time.time(),
        }


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
