"""The workspace quota as a file-system limit: a tmpfs of ``size`` and ``nr_inodes`` that no mount table holds.

``fsopen(2)``, ``fsconfig(2)`` and ``fsmount(2)`` make a *detached* mount: it is in no mount table (nothing
in ``/proc/self/mountinfo``, nothing to unmount), and it lives exactly as long as a file descriptor refers to
it: the sandbox's, and the jail's while a command runs (the jail binds it from ``/proc/self/fd/N``). When
frank is killed (``kill -9`` included) the kernel closes the descriptor and frees the tmpfs: there is no
mount left to leak and nothing to sweep at the next start.

A write past the size, or a file past ``nr_inodes``, fails with ENOSPC, inside a command and in frank's own
file tools alike. Only regular files, folders and symlinks are copied in (the task's seed) and back out (what
the agent left, into the episode's folder); a FIFO, socket or device is never opened. The copy back is
bounded by the quota: holes stay holes and hard links stay links (a 4 MB tmpfs of one 3 MB file linked
200 times and a 60 MB sparse file came back as 663 MB before).
"""

from __future__ import annotations

import ctypes
import errno
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
MAX_DEPTH = 64  # folder levels copied; deeper ones are left behind (and counted)


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


def copy_tree(src: Path, dst: Path, *, strict: bool = True) -> int:
    """Copy folders, regular files and symlinks from ``src`` into the existing folder ``dst``; returns how
    many entries were left behind. Never left behind unbounded: only a file's data is copied (a hole stays a
    hole), a hard-linked file once (its other names are hard links again), folders to ``MAX_DEPTH``
    levels; a FIFO, socket or device is left behind unopened. ``strict``: an error is raised (seeding: a full
    tmpfs means the seed does not fit); otherwise the entry is left behind and counted (copying back)."""
    copy = _Copy(strict)
    copy.tree(src, dst, 0)
    return copy.left_behind


class _Copy:
    def __init__(self, strict: bool) -> None:
        self.strict = strict
        self.left_behind = 0
        self.links: dict[tuple[int, int], Path] = {}

    def tree(self, src: Path, dst: Path, depth: int) -> None:
        with os.scandir(src) as entries:
            for entry in entries:
                try:
                    self.entry(entry, dst / entry.name, depth)
                except OSError:
                    if self.strict:
                        raise
                    self.left_behind += 1

    def entry(self, entry: os.DirEntry[str], dst: Path, depth: int) -> None:
        st = entry.stat(follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(entry.path), dst)
        elif stat.S_ISDIR(st.st_mode) and depth < MAX_DEPTH:
            dst.mkdir(mode=stat.S_IMODE(st.st_mode) | 0o700)
            self.tree(Path(entry.path), dst, depth + 1)
        elif stat.S_ISREG(st.st_mode):
            self.file(entry.path, st, dst)
        else:
            self.left_behind += 1

    def file(self, src: str, st: os.stat_result, dst: Path) -> None:
        first = self.links.get((st.st_dev, st.st_ino))
        if first is not None:
            os.link(first, dst)
            return
        _copy_file(src, dst, stat.S_IMODE(st.st_mode))
        if st.st_nlink > 1:
            self.links[(st.st_dev, st.st_ino)] = dst


def _copy_file(src: str, dst: Path, mode: int) -> None:
    fd_in = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        fd_out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        try:
            _copy_data(fd_in, fd_out)
        finally:
            os.close(fd_out)
    finally:
        os.close(fd_in)


def _copy_data(fd_in: int, fd_out: int) -> None:
    """Copy the data regions only (``SEEK_DATA``/``SEEK_HOLE``): a sparse file takes no room in the tmpfs,
    and must take none where it is copied."""
    size, pos = os.fstat(fd_in).st_size, 0
    while pos < size:
        try:
            pos = os.lseek(fd_in, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: nothing but a hole is left
                raise
            break
        pos = _copy_range(fd_in, fd_out, pos, os.lseek(fd_in, pos, os.SEEK_HOLE))
    os.ftruncate(fd_out, size)


def _copy_range(fd_in: int, fd_out: int, pos: int, end: int) -> int:
    while pos < end:
        chunk = os.pread(fd_in, min(COPY_CHUNK, end - pos), pos)
        if not chunk:
            return end
        view = memoryview(chunk)
        while view:
            written = os.pwrite(fd_out, view, pos)
            view, pos = view[written:], pos + written
    return pos


def write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte is written (a short write is not an error; ENOSPC is)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
