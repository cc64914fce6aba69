"""Machine metadata and NVML resources: what a start records about the machine it ran on.

The GPU path runs for real on a GPU machine (benchmarks/gpu_campaign.py, docs/gpu.md); here, without a
GPU, NVML's answers come from a TEST DOUBLE of the third-party ``pynvml`` module (never of our code), so the
sampled path, throttle reasons and the three honest statuses are all exercised."""

from __future__ import annotations

import hashlib
import os
import socket
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from frankenstein.engines.llamacpp import binary_version
from frankenstein.measure import machine
from frankenstein.measure.machine import MachineSnapshot, binary_sha256, differences, snapshot
from frankenstein.measure.resources import ResourceSampler, not_sampled


def fake_pynvml(pids: list[int], *, devices: int = 1) -> types.ModuleType:
    """TEST DOUBLE of pynvml: ``devices`` H200s, the given pids each holding 1000 MiB, power-capped."""
    m = types.ModuleType("pynvml")
    mem = types.SimpleNamespace(total=143771 * 2**20, used=5000 * 2**20)
    procs = [types.SimpleNamespace(pid=p, usedGpuMemory=1000 * 2**20) for p in pids]
    calls = {"init": 0}

    def init() -> None:
        calls["init"] += 1

    m.nvmlInit = init  # type: ignore[attr-defined]
    m.nvmlSystemGetDriverVersion = lambda: "580.159.04"  # type: ignore[attr-defined]
    m.nvmlSystemGetCudaDriverVersion = lambda: 13000  # type: ignore[attr-defined]
    m.nvmlDeviceGetCount = lambda: devices  # type: ignore[attr-defined]
    m.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    m.nvmlDeviceGetName = lambda h: b"NVIDIA H200"  # type: ignore[attr-defined]
    m.nvmlDeviceGetUUID = lambda h: f"GPU-{h}"  # type: ignore[attr-defined]
    m.nvmlDeviceGetMemoryInfo = lambda h: mem  # type: ignore[attr-defined]
    m.nvmlDeviceGetPowerUsage = lambda h: 123_000  # type: ignore[attr-defined]
    m.nvmlDeviceGetClockInfo = lambda h, kind: {1: 1980, 2: 3201}[kind]  # type: ignore[attr-defined]
    m.nvmlDeviceGetTemperature = lambda h, kind: 41  # type: ignore[attr-defined]
    m.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 0x4 | 0x1  # type: ignore[attr-defined]
    m.nvmlDeviceGetComputeRunningProcesses = lambda h: procs  # type: ignore[attr-defined]
    m.calls = calls  # type: ignore[attr-defined]
    return m


def test_snapshot_reads_this_machine() -> None:
    s = snapshot()
    assert s.host == socket.gethostname() and s.cpu_cores == os.cpu_count()
    assert s.cpu_usable is not None and 1 <= s.cpu_usable <= (s.cpu_cores or 1)
    assert s.load_avg is not None and len(s.load_avg) == 3
    assert s.cpu_model  # /proc/cpuinfo on Linux
    assert s.gpu_status in ("sampled", "no GPU", "not sampled")
    if not machine.has_nvidia_device():
        assert s.gpu_status == "no GPU" and s.gpus == ()
    assert MachineSnapshot.model_validate(s.as_dict()) == s  # the stored JSON reads back exactly


def test_not_asked_is_not_sampled_never_no_gpu() -> None:
    s = snapshot(gpu=False)
    assert s.gpu_status == "not sampled" and s.gpu_note == "GPU sampling was not asked for"
    assert not_sampled("fidelity start") == {
        "gpu": None,
        "status": "not sampled",
        "note": "not sampled: fidelity start",
    }


def test_nvml_missing_beside_a_device_is_not_sampled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    monkeypatch.setattr(machine, "has_nvidia_device", lambda: True)
    s = snapshot()
    assert (s.gpu_status, s.gpu_note) == ("not sampled", "pynvml is not installed")


def test_snapshot_with_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([], devices=2))
    s = snapshot()
    assert (s.gpu_status, s.driver_version, s.cuda_version) == ("sampled", "580.159.04", "13.0")
    assert [g.name for g in s.gpus] == ["NVIDIA H200", "NVIDIA H200"]
    g = s.gpus[0]
    assert (g.sm_clock_mhz, g.memory_clock_mhz, g.temperature_c, g.power_w) == (1980, 3201, 41, 123.0)
    assert g.throttle_reasons == ("gpu_idle", "sw_power_cap") and g.memory_total_mib == 143771
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([], devices=0))
    assert snapshot().gpu_status == "no GPU"


def test_differences_name_the_field() -> None:
    a = snapshot(gpu=False)
    b = a.model_copy(update={"host": "elsewhere", "cpu_cores": 64})
    assert differences(a, a) == []
    assert differences(a, b) == [f"host: {a.host} → elsewhere", f"cpu_cores: {a.cpu_cores} → 64"]


def test_binary_sha256(llama_server_bin: str, tmp_path: Path) -> None:
    assert binary_sha256(llama_server_bin) == hashlib.sha256(Path(llama_server_bin).read_bytes()).hexdigest()
    f = tmp_path / "engine"
    f.write_bytes(b"one")
    first = binary_sha256(f)
    f.write_bytes(b"two!")  # new size and mtime: the cache must not answer
    assert first != binary_sha256(f) == hashlib.sha256(b"two!").hexdigest()


def test_binary_sha256_sees_a_same_size_edit_with_the_mtime_put_back(tmp_path: Path) -> None:
    """The attack on the per-process cache: swap a pinned file's bytes for others of the same length
    and restore its mtime with os.utime, inside one process (as between two blocks of one frank run)."""
    f = tmp_path / "kernel.bin"
    f.write_bytes(b"kernel v1")
    st = f.stat()
    first = binary_sha256(f)
    f.write_bytes(b"kernel v2")  # same size
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert f.stat().st_size == st.st_size and f.stat().st_mtime_ns == st.st_mtime_ns
    assert binary_sha256(f) == hashlib.sha256(b"kernel v2").hexdigest() != first


def test_binary_sha256_sees_a_file_replaced_by_rename(tmp_path: Path) -> None:
    f, other = tmp_path / "engine", tmp_path / "engine.new"
    f.write_bytes(b"aaaa")
    st = f.stat()
    first = binary_sha256(f)
    other.write_bytes(b"bbbb")
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(other, f)  # a new inode at the same path, same size and mtime
    assert binary_sha256(f) == hashlib.sha256(b"bbbb").hexdigest() != first


VERSIONED = """#!/bin/sh
echo asked >> {calls}
echo "version: {version}" >&2
"""


def _versioned(path: Path, calls: Path, version: str) -> None:
    """A real executable that answers ``--version`` like llama-server and counts how often it was asked."""
    path.write_text(VERSIONED.format(calls=calls, version=version))  # in place: same path, same inode
    path.chmod(0o755)


def test_binary_version_is_asked_once_per_binary(tmp_path: Path) -> None:
    server, calls = tmp_path / "llama-server", tmp_path / "calls"
    _versioned(server, calls, "7001 (aaaaaaa)")
    assert [binary_version(str(server)) for _ in range(3)] == ["7001 (aaaaaaa)"] * 3
    assert calls.read_text().splitlines() == ["asked"]  # the later starts were served from the cache


def test_binary_version_of_a_binary_replaced_in_place_is_its_new_one(tmp_path: Path) -> None:
    """The attack on the version cache: new bytes of the same length at the same path (same inode), the mtime
    put back, inside one process (as a rebuilt llama-server between two blocks of one frank run)."""
    server, calls = tmp_path / "llama-server", tmp_path / "calls"
    _versioned(server, calls, "7001 (aaaaaaa)")
    st = server.stat()
    assert binary_version(str(server)) == "7001 (aaaaaaa)"
    _versioned(server, calls, "7002 (bbbbbbb)")
    os.utime(server, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (server.stat().st_ino, server.stat().st_size, server.stat().st_mtime_ns) == (
        st.st_ino,
        st.st_size,
        st.st_mtime_ns,
    )
    assert binary_version(str(server)) == "7002 (bbbbbbb)"
    other = tmp_path / "llama-server.new"  # and by a rename: a new inode at the same path
    _versioned(other, calls, "7003 (ccccccc)")
    os.replace(other, server)
    assert binary_version(str(server)) == "7003 (ccccccc)"
    assert binary_version(str(server)) == "7003 (ccccccc)"
    assert calls.read_text().splitlines() == ["asked"] * 3


def test_binary_version_of_the_real_llama_server(llama_server_bin: str) -> None:
    first = binary_version(llama_server_bin)
    assert "(" in first and first != "unknown"  # its own --version line, e.g. "7000 (0a1b2c3)"
    assert binary_version(llama_server_bin) == first


def test_sampler_without_gpu_says_which(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setattr("frankenstein.measure.resources.has_nvidia_device", lambda: False)
    with ResourceSampler() as r:
        r.attach(os.getpid())
    assert r.result == {"gpu": None, "status": "no GPU", "note": "no GPU: no NVIDIA device node or driver"}
    monkeypatch.setattr("frankenstein.measure.resources.has_nvidia_device", lambda: True)
    with ResourceSampler() as r:
        r.attach(os.getpid())
    assert r.result == not_sampled("pynvml is not installed")


def test_sampler_context_counts_the_engine_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    """Per-process memory of the attached pid's tree (here: this process) is what the record holds."""
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([os.getpid(), 1]))
    with ResourceSampler(interval_s=0.01) as r:
        r.attach(os.getpid())
    res: dict[str, Any] = r.result or {}
    assert res["status"] == "sampled" and res["memory_source"] == "per-process"
    g = res["gpu"][0]
    assert g["memory_mib_peak"] == 1000.0 and g["power_w_mean"] == 123.0
    assert (g["sm_clock_mhz_max"], g["temperature_c_max"], g["throttle_reasons"]) == (1980, 41, ["sw_power_cap"])
