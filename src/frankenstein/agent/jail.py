"""The sandbox launcher: a standalone, stdlib-only script run as ``python -I -S jail.py CONFIG -- ARGV...``.

Why a separate process instead of ``preexec_fn``: the agent loop runs beside HTTP threads, and
namespace and mount work after ``fork`` in a threaded parent is unsafe. This script starts
single-threaded, sets everything up, then ``exec``s the command.

Modes (chosen once per machine by ``sandbox.detect_isolation``):

* ``root``   — we are root: new mount, network and PID namespaces, then drop to an unprivileged uid
  (so the process limit applies and files outside the workspace are not writable).
* ``userns`` — not root: the same namespaces inside a new user namespace mapping our own uid.
* ``none``   — namespaces are refused here: only resource limits and a fresh session.

With namespaces the command sees: a read-only root file system, a private ``/tmp`` (tmpfs), the
workspace at ``/tmp/workspace`` (writable), optional read-only binds (the grader at ``/tmp/grader``),
hidden folders covered by empty read-only tmpfs, no network but loopback, and its own ``/proc``.
Because the command's shell is PID 1 of a new PID namespace, the kernel kills every process left in
it (daemons and ``setsid`` escapees included) when the shell exits or is killed.

Progress goes to ``report_fd``: ``pid N`` (the host pid of the namespace's PID 1, from the launcher
that stays outside) and ``ready`` just before ``exec``. Without ``ready`` the setup failed; the
reason is a ``jail:`` line on stderr and the exit status is 125.

As root, folders the unprivileged uid must reach but cannot enter (a Python installed under
``/root``) are re-exposed through a tmpfs over the closed parent (``expose``).
"""

import json
import os
import resource
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
AT_FDCWD, AT_RECURSIVE = -100, 0x8000
MOUNT_ATTR_RDONLY = 1
SYS_MOUNT_SETATTR = 442  # x86_64 and aarch64 share this number
SETUP_FAILED = 125
VIEW_WS = "/tmp/workspace"

_libc = None  # ctypes is imported only when namespaces are used: mode none starts faster


def _c():
    global _libc
    import ctypes

    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return ctypes, _libc


def _check(rc, what):
    if rc != 0:
        err = _c()[0].get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(src, target, fstype, flags, data=None):
    ctypes, libc = _c()
    enc = (lambda s: s.encode() if s is not None else None)
    _check(libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def _setattr(path, set_=0, clr=0):
    """mount_setattr(2) with AT_RECURSIVE: struct mount_attr {attr_set, attr_clr, propagation, userns_fd}."""
    ctypes, libc = _c()
    attr = (ctypes.c_uint64 * 4)(set_, clr, 0, 0)
    rc = libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, path.encode(), AT_RECURSIVE, ctypes.byref(attr),
                      ctypes.sizeof(attr))
    _check(rc, f"mount_setattr {path}")


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _enter_namespaces(mode):
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID
    uid, gid = os.getuid(), os.getgid()
    if mode == "userns":
        flags |= CLONE_NEWUSER
    _check(_c()[1].unshare(flags), "unshare")
    if mode == "userns":
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")


def _wait_for_child(pid):
    """The parent stays outside the new PID namespace: wait for its PID 1 and pass on its status."""
    os.closerange(3, 1 << 16)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        os._exit(128 + os.WTERMSIG(status))
    os._exit(os.WEXITSTATUS(status))


def _setup_mounts(cfg):
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    ws_fd = os.open(cfg["workspace"], os.O_PATH | os.O_DIRECTORY)
    bind_fds = [(os.open(src, os.O_PATH), dst, ro) for src, dst, ro in cfg.get("binds", [])]
    # Our Python may live under /tmp (a clone in /tmp): the private /tmp would hide it, so it is
    # bound back read-only at the same path once the tmpfs is up.
    tmp_keep = [(p, os.open(p, os.O_PATH | os.O_DIRECTORY)) for p in cfg.get("expose", [])
                if p.startswith("/tmp/")]
    _expose([p for p in cfg.get("expose", []) if not p.startswith("/tmp/")])
    for hidden in cfg.get("hide", []):
        if os.path.isdir(hidden):
            _mount("tmpfs", hidden, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=000")
    _setattr("/", set_=MOUNT_ATTR_RDONLY)
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={int(cfg.get('tmp_mb', 256))}m,mode=1777")
    _bind(ws_fd, VIEW_WS, ro=False)
    for fd, dst, ro in bind_fds:
        _bind(fd, dst, ro)
    for path, fd in tmp_keep:
        os.makedirs(path, mode=0o755, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND)
        _setattr(path, set_=MOUNT_ATTR_RDONLY)
        os.close(fd)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)


def _bind(fd, dst, ro):
    """Bind the folder behind ``fd`` (opened before anything was covered) at ``dst``. Not
    recursive, so a cover mounted over the source does not come along."""
    os.mkdir(dst)
    _mount(f"/proc/self/fd/{fd}", dst, None, MS_BIND)
    if ro:
        _setattr(dst, set_=MOUNT_ATTR_RDONLY)
    else:
        _setattr(dst, clr=MOUNT_ATTR_RDONLY)
    os.close(fd)


def _closed_ancestor(path):
    """The first folder above ``path`` that others may not enter (no o+x), or None."""
    cur = ""
    for name in path.strip("/").split("/")[:-1]:
        cur += "/" + name
        if not os.stat(cur).st_mode & 0o001:
            return cur
    return None


def _expose(paths):
    """Make ``paths`` reachable for the unprivileged uid although a parent folder is closed
    (a Python under ``/root``): cover the closed parent with a fresh tmpfs, recreate the folders
    down to each path and bind the real one there. The rest of the closed parent stays hidden."""
    groups = {}
    for path in paths:
        top = _closed_ancestor(path)
        if top is not None:
            groups.setdefault(top, []).append((path, os.open(path, os.O_PATH | os.O_DIRECTORY)))
    for top, items in groups.items():
        _mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=755")
        for path, fd in items:
            os.makedirs(path, mode=0o755, exist_ok=True)
            _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND)
            os.close(fd)


def _loopback_up():
    """A new network namespace has only ``lo``, and it is down; local servers in a task need it up."""
    import fcntl
    import socket
    import struct

    SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, req))[1]
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def _set_limits(limits):
    names = {"cpu": resource.RLIMIT_CPU, "as": resource.RLIMIT_AS, "fsize": resource.RLIMIT_FSIZE,
             "nproc": resource.RLIMIT_NPROC, "nofile": resource.RLIMIT_NOFILE, "core": resource.RLIMIT_CORE}
    for key, value in limits.items():
        resource.setrlimit(names[key], (int(value), int(value)))


def _drop_to(uid, gid):
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)


def _die_with_parent():
    """PID 1 of the namespace dies (and takes every process in it along) when the launcher above
    it is killed: a backup, since the sandbox kills PID 1 directly. Set after the uid change,
    which clears it."""
    PR_SET_PDEATHSIG = 1
    _check(_c()[1].prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0), "prctl")


def _report(fd, text):
    if fd is not None:
        os.write(fd, text.encode())


def main(argv):
    cfg = json.loads(argv[1])
    command = argv[3:]
    mode = cfg["mode"]
    report_fd = cfg.get("report_fd")
    try:
        if mode not in ("root", "userns", "none"):
            raise OSError("unknown mode")
        if mode in ("root", "userns"):
            _enter_namespaces(mode)
            pid = os.fork()
            if pid:
                _report(report_fd, f"pid {pid}\n")
                _wait_for_child(pid)
            _setup_mounts(cfg)
            _loopback_up()
        _set_limits(cfg.get("rlimits", {}))
        if mode == "root":
            _drop_to(int(cfg["uid"]), int(cfg["gid"]))
        if mode != "none":
            _die_with_parent()
        os.chdir(VIEW_WS if mode != "none" else cfg["workspace"])
        if report_fd is not None:
            _report(report_fd, "ready\n")
            os.close(report_fd)
    except OSError as exc:
        sys.stderr.write(f"jail: sandbox setup failed ({mode}): {exc}\n")
        sys.stderr.flush()
        os._exit(SETUP_FAILED)
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        sys.stderr.write(f"jail: cannot run {command[0]}: {exc}\n")
        sys.stderr.flush()
        os._exit(127)


if __name__ == "__main__":
    main(sys.argv)
