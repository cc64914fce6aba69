"""Workloads and task folders travel by content: the driver puts their bytes into Ray's object store,
the worker writes them into its own folder under their hash and uses them only if they hash to the
value the driver sent (the registered value, for a workload). No path of the driver's is ever opened on a
worker. Files a start writes into its campaign's ``workloads/`` (an agent start's trace) travel back the
same way and the driver writes them into the campaign (:func:`new_files`, :func:`write_back`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import re
import shutil
import tarfile
from pathlib import Path

from frankenstein.design.kinds.agent import suite_dir
from frankenstein.design.model import Registered
from frankenstein.design.runner import pinned_workload
from frankenstein.errors import ClusterError, TraceError, two_digests
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
            "the workload sent to this host hashes to {}, registered {}".format(*two_digests(workload.hash, expected))
        )
    return workload


Folder = tuple[str, bytes]  # (sha256 of the bytes, a deterministic tar of the folder)
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")


def folder_bytes(folder: Path) -> Folder:
    """A folder as one deterministic tar (sorted names, no times or owners; symbolic links left out)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in sorted(folder.rglob("*")):
            if path.is_symlink() or not (path.is_file() or path.is_dir()):
                continue
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(folder)))
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if path.is_file():
                with path.open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    data = buf.getvalue()
    return hashlib.sha256(data).hexdigest(), data


def unpack_folder(folder: Folder, root: Path) -> Path:
    """The folder rebuilt under ``root/<hash>`` on a worker; :class:`ClusterError` unless the bytes hash as sent."""
    digest, data = folder
    got = hashlib.sha256(data).hexdigest()
    if got != digest:
        raise ClusterError(
            "the task folder sent to this host hashes to {}, the driver sent {}".format(*two_digests(got, digest))
        )
    dest = root / digest[:32]
    if dest.is_dir():
        return dest
    tmp = root / f".{digest[:32]}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(tmp, filter="data")
    try:
        tmp.rename(dest)
    except OSError:  # another worker of this host unpacked the same folder first
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def suite_bytes(reg: Registered) -> Folder | None:
    """An agent design's task suite folder, packed on the driver; None for other kinds."""
    if reg.design.kind != "agent":
        return None
    return folder_bytes(suite_dir(reg.design.agent.suite))


def with_suite(reg: Registered, folder: Path) -> Registered:
    """``reg`` with its agent suite read from ``folder`` on this host (the design's content is unchanged)."""
    agent = reg.design.agent.model_copy(update={"suite": str(folder)})
    design = reg.design.model_copy(update={"agent": agent})
    return dataclasses.replace(reg, frozen=reg.frozen.model_copy(update={"design": design}))


def listing(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in folder.iterdir() if p.is_file()} if folder.is_dir() else {}


def new_files(folder: Path, before: dict[str, int]) -> dict[str, bytes]:
    """Files of ``folder`` written since ``before`` (:func:`listing`), by name."""
    now = listing(folder)
    return {name: (folder / name).read_bytes() for name, at in now.items() if before.get(name) != at}


def write_back(files: dict[str, bytes], folder: Path) -> None:
    """On the driver: a start's files into the campaign's ``workloads/`` (plain names only)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        if SAFE_NAME.fullmatch(name) and ".." not in name:
            (folder / name).write_bytes(data)
