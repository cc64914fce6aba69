"""The workspace quota as a file-system limit: a tmpfs of ``size`` and ``nr_inodes`` that no mount table holds.

``fsopen(2)``, ``fsconfig(2)`` and ``fsmount(2)`` make a *detached* mount: it is in no mount table (nothing
in ``/proc/self/mountinfo``, nothing to unmount), and it lives exactly as long as a file descriptor refers to
it: the sandbox's, and the jail's while a command runs (the jail binds it from ``/proc/self/fd/N``). When
frank is killed (``kill -9`` included) the kernel closes the descriptor and frees the tmpfs: there is no
mount left to leak and nothing to sweep at the next start.

A write past the size, or a file past ``nr_inodes``, fails with ENOSPC, inside a command and in frank's own
file tools alike. Only regular files, folders and symlinks are copied in (the task's seed) and back out (what
the agent left, into the episode's folder); a FIFO, socket or device is never opened.
"""

from __future__ import annotations

import ctypes
import functools
import os
import stat
from pathlib import Path

SYS_FSOPEN, SYS_FSCONFIG, SYS_FSMOUNT = 430, 431, 432  # one number on every architecture (the shared table)
FSOPEN_CLOEXEC, FSMOUNT_CLOEXEC = 1, 1
FSCONFIG_SET_STRING, FSCONFIG_CMD_CREATE = 1, 6
MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV = 0x2, 0x4
BYTES_PER_INODE = 4096  # nr_inodes: one file per 4 KiB of quota, at least MIN_INODES
MIN_INODES = 1024
COPY_CHUNK = 1 << 20


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _call(what: str, *args: object) -> int:
    rc = int(_libc().syscall(*args))
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return rc


def inodes_for(size_mb: int) -> int:
    """The files (folders and links included) a workspace of ``size_mb`` may hold."""
    return max(MIN_INODES, (size_mb << 20) // BYTES_PER_INODE)


def detached_tmpfs(size_mb: int, uid: int) -> int:
    """A descriptor of the root of a new detached tmpfs owned by ``uid`` (close it to free the tmpfs)."""
    fs = _call("fsopen", SYS_FSOPEN, b"tmpfs", FSOPEN_CLOEXEC)
    try:
        options = {"size": f"{size_mb}m", "nr_inodes": str(inodes_for(size_mb)), "mode": "755"}
        options |= {"uid": str(uid), "gid": str(uid)}
        for key, value in options.items():
            _call(f"fsconfig {key}", SYS_FSCONFIG, fs, FSCONFIG_SET_STRING, key.encode(), value.encode(), 0)
        _call("fsconfig create", SYS_FSCONFIG, fs, FSCONFIG_CMD_CREATE, None, None, 0)
        return _call("fsmount", SYS_FSMOUNT, fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)
    finally:
        os.close(fs)


def fd_path(fd: int) -> Path:
    """The path our own process reaches the tree behind ``fd`` by."""
    return Path(f"/proc/self/fd/{fd}")


def copy_tree(src: Path, dst: Path) -> None:
    """Copy folders, regular files and symlinks from ``src`` into the existing folder ``dst``; anything
    else (a FIFO, a socket, a device) is left behind unopened."""
    with os.scandir(src) as entries:
        for entry in entries:
            _copy_entry(entry, dst / entry.name)


def _copy_entry(entry: os.DirEntry[str], dst: Path) -> None:
    mode = entry.stat(follow_symlinks=False).st_mode
    if stat.S_ISLNK(mode):
        os.symlink(os.readlink(entry.path), dst)
    elif stat.S_ISDIR(mode):
        dst.mkdir(mode=stat.S_IMODE(mode) | 0o700)
        copy_tree(Path(entry.path), dst)
    elif stat.S_ISREG(mode):
        _copy_file(entry.path, dst, stat.S_IMODE(mode))


def _copy_file(src: str, dst: Path, mode: int) -> None:
    fd_in = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        fd_out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        try:
            while chunk := os.read(fd_in, COPY_CHUNK):
                write_all(fd_out, chunk)
        finally:
            os.close(fd_out)
    finally:
        os.close(fd_in)


def write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte is written (a short write is not an error; ENOSPC is)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
