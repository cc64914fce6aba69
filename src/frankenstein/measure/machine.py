"""The machine a start ran on, as a record beside its numbers (pyperf's habit).

``snapshot()`` reads, without starting anything: host name, CPU model, core counts, load average,
the CPU frequency governor where the kernel exposes it, and per GPU (through NVML) name, UUID, memory,
SM and memory clocks, temperature, power and the active clock-throttle reasons, with the driver and CUDA
versions. ``binary_sha256()`` hashes an engine binary (cached by path, device, inode, size, mtime and
ctime; ctime cannot be set back by ``os.utime``, so an edit that keeps the size and restores the mtime is
still seen), because an
engine's version string cannot tell a CUDA build from a CPU build.

GPU status is one of three, never confused:
- ``sampled``: NVML answered; ``gpus`` lists what it saw.
- ``no GPU``: NVML answered with zero devices, or there is no NVIDIA device node at all (/dev/nvidia*).
- ``not sampled``: a GPU may be there but we could not look (pynvml missing, NVML failed, or the caller
  said not to); ``gpu_note`` says why. This is never printed as "no GPU".

Public API: ``MachineSnapshot``, ``GpuState``, ``snapshot``, ``gpu_states``, ``binary_sha256``,
``differences``, ``nvml``.
"""

from __future__ import annotations

import glob
import hashlib
import os
import platform
import socket
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

GpuStatus = Literal["sampled", "no GPU", "not sampled"]

# NVML clock-event (throttle) reason bits, from nvml.h (nvmlClocksEventReason*).
THROTTLE_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


class GpuState(BaseModel):
    """One GPU at one moment."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int
    name: str
    uuid: str | None = None
    memory_total_mib: float | None = None
    memory_used_mib: float | None = None
    sm_clock_mhz: int | None = None
    memory_clock_mhz: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    throttle_reasons: tuple[str, ...] = ()


class MachineSnapshot(BaseModel):
    """The machine at one moment; ``differences`` compares two of them on the fields that should not move."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: int = 1
    taken_at: float
    host: str
    platform: str
    cpu_model: str | None
    cpu_cores: int | None
    cpu_usable: int | None
    load_avg: tuple[float, float, float] | None
    cpu_governor: str | None
    gpu_status: GpuStatus
    gpu_note: str = ""
    driver_version: str | None = None
    cuda_version: str | None = None
    gpus: tuple[GpuState, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


# Fields that describe the machine rather than its moment: a start whose values differ ran elsewhere.
IDENTITY_FIELDS = ("host", "cpu_model", "cpu_cores", "cpu_governor", "driver_version", "cuda_version")


def nvml() -> tuple[Any | None, str]:
    """(initialised pynvml module or None, reason when None)."""
    try:
        import pynvml
    except ImportError:
        return None, "pynvml is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - any NVML failure means "could not look"
        return None, f"NVML did not initialise ({exc})"
    return pynvml, ""


def has_nvidia_device() -> bool:
    return bool(glob.glob("/dev/nvidia[0-9]*")) or Path("/proc/driver/nvidia").exists()


def snapshot(*, gpu: bool = True) -> MachineSnapshot:
    """Read the machine now; GPU fields through NVML unless ``gpu`` is False (then "not sampled")."""
    status, note, driver, cuda, gpus = _gpu_part(gpu)
    return MachineSnapshot(
        taken_at=time.time(),
        host=socket.gethostname(),
        platform=platform.platform(),
        cpu_model=cpu_model(),
        cpu_cores=os.cpu_count(),
        cpu_usable=_usable_cores(),
        load_avg=load_avg(),
        cpu_governor=cpu_governor(),
        gpu_status=status,
        gpu_note=note,
        driver_version=driver,
        cuda_version=cuda,
        gpus=tuple(gpus),
    )


def _gpu_part(wanted: bool) -> tuple[GpuStatus, str, str | None, str | None, list[GpuState]]:
    if not wanted:
        return "not sampled", "GPU sampling was not asked for", None, None, []
    nv, why = nvml()
    if nv is None:
        if not has_nvidia_device():
            return "no GPU", "no NVIDIA device node (/dev/nvidia*) and no driver", None, None, []
        return "not sampled", why, None, None, []
    driver = _text(_call(nv.nvmlSystemGetDriverVersion))
    cuda_raw = _call(nv.nvmlSystemGetCudaDriverVersion)
    cuda = f"{cuda_raw // 1000}.{cuda_raw % 1000 // 10}" if isinstance(cuda_raw, int) else None
    states = gpu_states(nv)
    if not states:
        return "no GPU", "NVML sees no devices", driver, cuda, []
    return "sampled", "", driver, cuda, states


def gpu_states(nv: Any) -> list[GpuState]:
    """Every GPU NVML sees, now (each field None where this GPU or driver does not report it)."""
    out = []
    count = _call(nv.nvmlDeviceGetCount) or 0
    for i in range(count):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        mem = _call(nv.nvmlDeviceGetMemoryInfo, h)
        power = _call(nv.nvmlDeviceGetPowerUsage, h)
        reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        mask = _call(reasons_fn, h) if reasons_fn else None
        out.append(
            GpuState(
                index=i,
                name=_text(_call(nv.nvmlDeviceGetName, h)) or "unknown",
                uuid=_text(_call(nv.nvmlDeviceGetUUID, h)),
                memory_total_mib=None if mem is None else mem.total / 2**20,
                memory_used_mib=None if mem is None else mem.used / 2**20,
                sm_clock_mhz=_call(nv.nvmlDeviceGetClockInfo, h, getattr(nv, "NVML_CLOCK_SM", 1)),
                memory_clock_mhz=_call(nv.nvmlDeviceGetClockInfo, h, getattr(nv, "NVML_CLOCK_MEM", 2)),
                temperature_c=_call(nv.nvmlDeviceGetTemperature, h, getattr(nv, "NVML_TEMPERATURE_GPU", 0)),
                power_w=None if power is None else power / 1000.0,
                throttle_reasons=throttle_names(mask) if isinstance(mask, int) else (),
            )
        )
    return out


def throttle_names(mask: int) -> tuple[str, ...]:
    return tuple(name for bit, name in THROTTLE_REASONS.items() if mask & bit)


def _call(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - NVML raises NVMLError_NotSupported and friends per field
        return None


def _text(v: Any) -> str | None:
    if v is None:
        return None
    return v.decode() if isinstance(v, bytes) else str(v)


def cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "Model", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _usable_cores() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def load_avg() -> tuple[float, float, float] | None:
    try:
        return os.getloadavg()
    except OSError:
        return None


def cpu_governor() -> str | None:
    """cpu0's scaling governor, or None where the kernel (a VM, a container) does not expose it."""
    try:
        return Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor").read_text().strip() or None
    except OSError:
        return None


_SHA_CACHE: dict[tuple[str, int, int, int, int, int], str] = {}


def _identity(p: Path) -> tuple[str, int, int, int, int, int]:
    st = p.stat()
    return (str(p), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def binary_sha256(path: str | Path) -> str:
    """sha256 of a file (an engine binary or model), cached per process by its identity.

    The key is the resolved path with the file's device, inode, size, mtime and ctime: a file replaced
    by a rename has a new inode, and any write (or ``os.utime`` to put the mtime back) moves the ctime.
    A file that changed while it was hashed is not cached.
    """
    p = Path(path).resolve()
    key = _identity(p)
    cached = _SHA_CACHE.get(key)
    if cached is not None:
        return cached
    h = hashlib.sha256()
    with p.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    digest = h.hexdigest()
    if _identity(p) == key:
        _SHA_CACHE[key] = digest
    return digest


def differences(a: MachineSnapshot, b: MachineSnapshot) -> list[str]:
    """Identity fields (and GPU names) on which two snapshots differ, as ``field: a → b``."""
    out = [f"{f}: {getattr(a, f)} → {getattr(b, f)}" for f in IDENTITY_FIELDS if getattr(a, f) != getattr(b, f)]
    names_a, names_b = [g.name for g in a.gpus], [g.name for g in b.gpus]
    if names_a != names_b or a.gpu_status != b.gpu_status:
        out.append(f"gpus: {a.gpu_status} {names_a} → {b.gpu_status} {names_b}")
    return out
