"""Workloads travel by content: the driver puts the pinned file's bytes into Ray's object store, the
worker writes them to its own folder under their hash and loads them only if they hash to the
registered value. No path of the driver's is ever opened on a worker."""

from __future__ import annotations

from pathlib import Path

from frankenstein.design.model import Registered
from frankenstein.design.runner import pinned_workload
from frankenstein.errors import ClusterError, TraceError
from frankenstein.workload.trace import Workload, load_trace


def workload_bytes(reg: Registered) -> bytes | None:
    """The registered workload's bytes, after checking on the driver that it still hashes as registered."""
    if pinned_workload(reg) is None or not reg.frozen.workload_path:
        return None
    return Path(reg.frozen.workload_path).read_bytes()


def unpack_workload(data: bytes | None, reg: Registered, folder: Path) -> Workload | None:
    """The workload rebuilt from ``data`` on a worker; :class:`ClusterError` unless it hashes as registered."""
    if data is None:
        return None
    expected = reg.frozen.workload_hash or ""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{expected[:32] or 'workload'}.jsonl"
    path.write_bytes(data)
    try:
        workload = load_trace(path)
    except TraceError as exc:
        raise ClusterError(f"the workload sent to this host does not load: {exc}") from exc
    if workload.hash != expected:
        raise ClusterError(
            f"the workload sent to this host hashes to {workload.hash[:12]}…, registered {expected[:12]}…"
        )
    return workload
