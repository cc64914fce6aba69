"""NVML sampling on a real GPU: start a process that holds GPU memory and runs matrix products, sample it
with ``frankenstein.measure.resources.ResourceSampler`` exactly as a start does, and print what was read.

Run on a machine with an NVIDIA GPU, PyTorch and ``nvidia-ml-py`` (the ``pynvml`` module):

    python3 benchmarks/report_nvml_sample.py --seconds 8 --gib 6

It prints: the idle device (sampler with no pid: whole-device figures), the sampler's record of the
busy child (per-process memory where NVML lists the child's pid, whole-device otherwise), what the child
itself reports from PyTorch, and NVML's raw process list read once mid-run, so the numbers can be checked
against each other. Without a GPU the sampler records "absent", which it prints too.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from frankenstein.measure.resources import ResourceSampler  # noqa: E402

CHILD = r"""
import json, sys, time, torch
secs, gib = float(sys.argv[1]), float(sys.argv[2])
x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
ballast = torch.empty(int(gib * 2**30), dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("ready", flush=True)
end, n = time.time() + secs, 0
while time.time() < end:
    for _ in range(20):
        y = x @ x
    torch.cuda.synchronize()
    n += 20
print(json.dumps({"matmuls": n, "tflops": 2 * 8192**3 * n / secs / 1e12,
                  "torch_max_allocated_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1),
                  "torch_reserved_mib": round(torch.cuda.memory_reserved() / 2**20, 1)}), flush=True)
"""


def raw_processes() -> list[dict[str, float]]:
    """NVML's compute-process list on every GPU, read once (for checking the sampler's attribution)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                used = None if p.usedGpuMemory is None else round(p.usedGpuMemory / 2**20, 1)
                out.append({"gpu": i, "pid": p.pid, "used_mib": used})
        return out
    except Exception as exc:  # noqa: BLE001 - a diagnostic; report whatever went wrong
        return [{"error": repr(exc)}]  # type: ignore[dict-item]


def idle(seconds: float) -> dict:
    s = ResourceSampler(interval_s=0.1)
    s.start(None)
    time.sleep(seconds)
    return s.stop()


def busy(seconds: float, gib: float) -> tuple[dict, dict, list, int]:
    """Start the child in its own session, sample it until it exits, and always reap it."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(seconds), str(gib)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    sampler = ResourceSampler(interval_s=0.1)
    sampler.start(proc.pid)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().strip()
        time.sleep(min(2.0, seconds / 2))
        raw = raw_processes()
        rest = proc.stdout.read()
        proc.wait(timeout=seconds + 120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    record = sampler.stop()
    child = json.loads(rest.strip().splitlines()[-1]) if first == "ready" and rest.strip() else {"output": first + rest}
    return record, child, raw, proc.pid


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--gib", type=float, default=6.0, help="GPU memory the child holds beside its matrices")
    a = ap.parse_args()
    print("idle device (no pid: whole-device figures):")
    print(json.dumps(idle(1.5), indent=1))
    record, child, raw, pid = busy(a.seconds, a.gib)
    print(f"busy child pid {pid} ({a.seconds:g} s of bf16 8192^3 matmuls, {a.gib:g} GiB ballast):")
    print("sampler record:", json.dumps(record, indent=1))
    print("child (torch):", json.dumps(child))
    print("NVML process list mid-run:", json.dumps(raw))


if __name__ == "__main__":
    main()
