"""The workspace quota as a file-system limit: a tmpfs of ``size`` and ``nr_inodes`` that no mount table holds.

``fsopen(2)``, ``fsconfig(2)`` and ``fsmount(2)`` make a *detached* mount: it is in no mount table (nothing
in ``/proc/self/mountinfo``, nothing to unmount), and it lives exactly as long as a file descriptor refers to
it: the sandbox's, and the jail's while a command runs (the jail binds it from ``/proc/self/fd/N``). When
frank is killed (``kill -9`` included) the kernel closes the descriptor and frees the tmpfs: there is no
mount left to leak and nothing to sweep at the next start.

As root frank makes the tmpfs itself (:func:`detached_tmpfs`). Without root (mode ``userns``) this file
runs as a stdlib-only script, ``python -I -S tmpfs.py SIZE_MB SOCKET_FD`` (:func:`tmpfs_in_userns`): a
child process in a new user namespace of its own, where it may mount a tmpfs, makes the detached tmpfs and
hands the descriptor back over a Unix socket, then exits; frank, unprivileged, reaches the tmpfs through
the descriptor, and the jail's own user namespace binds it like any folder.

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
import socket
import stat
import subprocess
import sys
from pathlib import Path

SYS_FSOPEN, SYS_FSCONFIG, SYS_FSMOUNT = 430, 431, 432  # one number on every architecture (the shared table)
FSOPEN_CLOEXEC, FSMOUNT_CLOEXEC = 1, 1
FSCONFIG_SET_STRING, FSCONFIG_CMD_CREATE = 1, 6
MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV = 0x2, 0x4
BYTES_PER_INODE = 4096  # nr_inodes: one file per 4 KiB of quota, at least MIN_INODES
MIN_INODES = 1024
COPY_CHUNK = 1 << 20
MAX_DEPTH = 64  # folder levels copied; deeper ones are left behind (and counted)
CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000
MAKER_TIMEOUT_S = 30


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


def detached_tmpfs(size_mb: int, uid: int, gid: int) -> int:
    """A descriptor of the root of a new detached tmpfs owned by ``uid`` (close it to free the tmpfs)."""
    fs = _call("fsopen", SYS_FSOPEN, b"tmpfs", FSOPEN_CLOEXEC)
    try:
        options = {"size": f"{size_mb}m", "nr_inodes": str(inodes_for(size_mb)), "mode": "755"}
        options |= {"uid": str(uid), "gid": str(gid)}
        for key, value in options.items():
            _call(f"fsconfig {key}", SYS_FSCONFIG, fs, FSCONFIG_SET_STRING, key.encode(), value.encode(), 0)
        _call("fsconfig create", SYS_FSCONFIG, fs, FSCONFIG_CMD_CREATE, None, None, 0)
        return _call("fsmount", SYS_FSMOUNT, fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)
    finally:
        os.close(fs)


def tmpfs_in_userns(size_mb: int) -> int:
    """As :func:`detached_tmpfs` (owned by our uid and gid), made by a child process in a user namespace of
    its own, so frank need not be root. Raises OSError with the child's reason."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours:
        with theirs:
            argv = [sys.executable, "-I", "-S", __file__, str(size_mb), str(theirs.fileno())]
            done = subprocess.run(
                argv, pass_fds=(theirs.fileno(),), capture_output=True, text=True, timeout=MAKER_TIMEOUT_S
            )
        if done.returncode != 0:
            said = done.stderr.strip().splitlines()
            raise OSError(0, said[-1] if said else f"the tmpfs maker exited {done.returncode}")
        _, fds, _, _ = socket.recv_fds(ours, 1, 1, socket.MSG_CMSG_CLOEXEC)
    if not fds:
        raise OSError(0, "the tmpfs maker handed back no descriptor")
    return fds[0]


def _make_in_userns(size_mb: int, sock_fd: int) -> None:
    """The child's side: new user and mount namespaces (fsopen asks for CAP_SYS_ADMIN over the mount
    namespace's owner) mapping only our own uid and gid, the tmpfs, the hand-over."""
    uid, gid = os.getuid(), os.getgid()
    if _libc().unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), f"unshare: {os.strerror(ctypes.get_errno())}")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        Path(f"/proc/self/{name}").write_text(text)
    fd = detached_tmpfs(size_mb, uid, gid)
    with socket.socket(fileno=sock_fd) as sock:
        socket.send_fds(sock, [b"t"], [fd])


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


if __name__ == "__main__":
    try:
        _make_in_userns(int(sys.argv[1]), int(sys.argv[2]))
    except OSError as exc:
        sys.exit(f"tmpfs in a user namespace: {exc.strerror or exc}")
