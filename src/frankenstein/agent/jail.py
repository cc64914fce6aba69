"""The sandbox launcher: a standalone, stdlib-only script run as ``python -I -S jail.py CONFIG -- ARGV...``.

Why a separate process instead of ``preexec_fn``: the agent loop runs beside HTTP threads, and
namespace and mount work after ``fork`` in a threaded parent is unsafe. This script starts
single-threaded, sets everything up, then ``exec``s the command.

Modes (chosen once per machine by ``sandbox.detect_isolation``):

* ``root``   — we are root: new mount, network and PID namespaces, then drop to an unprivileged uid
  (so the process limit applies and files outside the workspace are not writable).
* ``userns`` — not root: the same namespaces inside a new user namespace mapping our own uid.
* ``none``   — namespaces are refused here: only resource limits and a fresh session.

With namespaces the command sees a minimal root, built on a fresh tmpfs and pivoted into: the
system folders (``/usr``, ``/etc``, ``/bin``...) and the Python that runs the tools, read-only; the
workspace at ``/tmp/workspace`` (writable); optional read-only binds (the grader at ``/tmp/grader``);
fresh private ``/tmp``, ``/var/tmp``, ``/run`` and ``/dev/shm``; a ``/dev`` of a few device nodes;
its own ``/proc``. A tmpfs workspace (the quota as a file-system limit) comes as ``/proc/self/fd/N``, a
detached mount the sandbox holds open; it is bound like any folder and ``N`` is closed before ``exec``. Nothing else of the host is there: no home folders, no checkout, no host socket
paths. Hidden folders that lie inside what is bound (the task suite inside an installed package)
are covered by an empty mode-000 tmpfs *after* binding, whatever the install layout. The network
namespace has only loopback, which also cuts off the host's abstract Unix sockets. Because the
command's shell is PID 1 of a new PID namespace, the kernel kills every process left in it (daemons
and ``setsid`` escapees included) when the shell exits or is killed.

The launcher dies with the process that started it (``cfg["parent"]``; a parent-death signal, checked
against a parent already gone) and PID 1 with the launcher, so a ``kill -9`` of frank ends a running
command and frees the tmpfs workspace its namespace binds.

Progress goes to ``report_fd``: ``pid N`` (the host pid of the namespace's PID 1, from the launcher
that stays outside) and ``ready`` just before ``exec``. Without ``ready`` the setup failed; the
reason is a ``jail:`` line on stderr and the exit status is 125.
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
MNT_DETACH = 2
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
SETUP_FAILED = 125
VIEW_WS = "/tmp/workspace"
# The minimal root: system folders (read-only, or the distribution's symlinks), the Python that
# runs the tools (cfg "python"), the workspace, and fresh private folders. Nothing else of the host.
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
FRESH = ("/tmp", "/var/tmp", "/run", "/dev/shm")
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
DEV_LINKS = (
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
)

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

    def enc(s):
        return s.encode() if s is not None else None

    _check(libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def _setattr(path, set_=0, clr=0, recursive=True):
    """mount_setattr(2): struct mount_attr {attr_set, attr_clr, propagation, userns_fd}."""
    ctypes, libc = _c()
    attr = (ctypes.c_uint64 * 4)(set_, clr, 0, 0)
    rc = libc.syscall(
        SYS_MOUNT_SETATTR,
        AT_FDCWD,
        path.encode(),
        AT_RECURSIVE if recursive else 0,
        ctypes.byref(attr),
        ctypes.sizeof(attr),
    )
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


def _under(path, roots):
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _setup_mounts(cfg):
    """Build the minimal root on a fresh tmpfs (mounted over ``/tmp`` in our mount namespace, which
    is where every source was opened from first), then pivot into it."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    ws_fd = os.open(cfg["workspace"], os.O_PATH | os.O_DIRECTORY)
    if cfg.get("workspace_fd") is not None:  # a tmpfs workspace, passed as /proc/self/fd/N: the command gets no fd
        os.close(int(cfg["workspace_fd"]))
    bind_fds = [(os.open(src, os.O_PATH), dst, ro) for src, dst, ro in cfg.get("binds", [])]
    system = [
        (
            name,
            os.readlink(name) if os.path.islink(name) else None,
            None if os.path.islink(name) else os.open(name, os.O_PATH | os.O_DIRECTORY),
        )
        for name in SYSTEM
        if os.path.lexists(name) and (os.path.islink(name) or os.path.isdir(name))
    ]
    bound = [name for name, link, _ in system if link is None]
    python = [(p, os.open(p, os.O_PATH | os.O_DIRECTORY)) for p in cfg.get("python", []) if not _under(p, bound)]
    devices = [(d, os.open(f"/dev/{d}", os.O_PATH)) for d in DEVICES if os.path.exists(f"/dev/{d}")]
    root = "/tmp"
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    for name, link, fd in system:
        if link is not None:
            os.symlink(link, root + name)
        else:
            _bind(fd, root + name, ro=True, recursive=True)
    for path in [*FRESH, "/proc", *(p for p, _ in python if not _under(p, FRESH))]:
        os.makedirs(root + path, mode=0o755, exist_ok=True)
    _setattr(root, set_=MOUNT_ATTR_RDONLY)
    _mount("tmpfs", root + "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=755")
    for name, fd in devices:
        open(f"{root}/dev/{name}", "w").close()
        _mount(f"/proc/self/fd/{fd}", f"{root}/dev/{name}", None, MS_BIND)
        os.close(fd)
    for name, target in DEV_LINKS:
        os.symlink(target, f"{root}/dev/{name}")
    os.mkdir(f"{root}/dev/shm")
    _setattr(root + "/dev", set_=MOUNT_ATTR_RDONLY, recursive=False)
    fresh = f"size={int(cfg.get('tmp_mb', 256))}m,nr_inodes={int(cfg.get('tmp_inodes', 65536))},mode=1777"
    for path in FRESH:
        _mount("tmpfs", root + path, "tmpfs", MS_NOSUID | MS_NODEV, fresh)
    for path, fd in python:
        os.makedirs(root + path, mode=0o755, exist_ok=True)
        _bind(fd, root + path, ro=True, recursive=True, make=False)
    _bind(ws_fd, root + VIEW_WS, ro=False)
    for fd, dst, ro in bind_fds:
        _bind(fd, root + dst, ro)
    visible = bound + [p for p, _ in python]
    for hidden in cfg.get("hide", []):
        if _under(hidden, visible) and os.path.isdir(root + hidden):
            _mount("tmpfs", root + hidden, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=000")
    _mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _pivot(root)


def _pivot(root):
    """pivot_root(".", "."), then detach the old root stacked under the new one (pivot_root(2))."""
    os.chdir(root)
    number = SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise OSError(0, f"pivot_root: unknown machine {os.uname().machine}")
    ctypes, libc = _c()
    _check(libc.syscall(number, b".", b"."), "pivot_root")
    _check(libc.umount2(b".", MNT_DETACH), "umount old root")
    os.chdir("/")


def _bind(fd, dst, ro, recursive=False, make=True):
    """Bind the folder behind ``fd`` (opened before anything was mounted) at ``dst``. Not recursive
    unless asked, so nothing mounted under the source comes along."""
    if make:
        os.mkdir(dst)
    _mount(f"/proc/self/fd/{fd}", dst, None, MS_BIND | (MS_REC if recursive else 0))
    if ro:
        _setattr(dst, set_=MOUNT_ATTR_RDONLY, recursive=recursive)
    else:
        _setattr(dst, clr=MOUNT_ATTR_RDONLY, recursive=False)
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
    names = {
        "cpu": resource.RLIMIT_CPU,
        "as": resource.RLIMIT_AS,
        "fsize": resource.RLIMIT_FSIZE,
        "nproc": resource.RLIMIT_NPROC,
        "nofile": resource.RLIMIT_NOFILE,
        "core": resource.RLIMIT_CORE,
    }
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


def _outlive_no_parent(parent):
    """The launcher dies with the process that started it (frank, even by ``kill -9``), and PID 1 with the
    launcher: a running command, and the tmpfs workspace its namespace holds, never outlive frank."""
    _die_with_parent()
    if parent is not None and os.getppid() != int(parent):
        raise OSError(0, "the process that started the sandbox is gone")


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
            _outlive_no_parent(cfg.get("parent"))
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
