"""The agent sandbox without Docker: every tool command is a fresh process tree behind ``jail.py``.

What a command gets (see ``jail.py`` for how): its own session, resource limits (CPU time, address
space, file size, processes, open files), a scrubbed environment (no keys: a minimal PATH, HOME,
LANG), and — where the machine allows namespaces — no network, a minimal read-only root (system
folders, the Python that runs the tools, the workspace; fresh ``/tmp``, ``/var/tmp``, ``/run``,
``/dev/shm``), hidden task folders covered wherever they are installed, and a PID namespace so that
nothing it started survives it. Long output is cut to head + tail with a note; reading stops (and the command is
killed) past ``max_output_bytes``; on timeout the whole tree is killed.

The file tools (:meth:`Sandbox.read_file`, :meth:`Sandbox.write_file`) run in our process but only
on paths that resolve inside the workspace.

The workspace quota (``workspace_mb``) is a file-system limit wherever the sandbox has namespaces (modes
root and userns): the workspace is a detached tmpfs of that size (:mod:`frankenstein.agent.tmpfs`), seeded from the episode's folder and
copied back into it on :meth:`Sandbox.close`, so a write past it fails with ENOSPC inside the command
and in the file tools. Elsewhere it is a total checked after each tool call (:meth:`Sandbox.quota_problem`),
which one command can pass until the check; every episode records which quota was in force.

Which isolation the machine gives is probed once (:func:`detect_isolation`) and recorded with every
episode, including the note saying what is missing when it falls back.
"""

from __future__ import annotations

import errno
import functools
import itertools
import json
import os
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from frankenstein.agent.tasks import SandboxLimits
from frankenstein.agent.tmpfs import copy_tree, detached_tmpfs, fd_path, inodes_for, tmpfs_in_userns, write_all
from frankenstein.errors import SandboxError

JAIL = Path(__file__).with_name("jail.py")
VIEW_WS = "/tmp/workspace"
VIEW_GRADER = "/tmp/grader"
SANDBOX_UID = 65534  # nobody: the fallback where our user namespace maps no uid of the sandboxes' own range
# As root every sandbox runs as a uid of its own (no /etc/passwd entry needed): the process limit counts per uid,
# so ten processes of another sandbox (or of `nobody`) can no longer stop this one's shell from starting.
UID_BASE, UIDS_PER_PROCESS = 200_000_000, 1000
_SANDBOXES = itertools.count()
MAX_NAME_BYTES, MAX_PATH_BYTES = 255, 4096  # Linux NAME_MAX and PATH_MAX
MAX_LINKS = 40  # symlinks followed in one path before it is called a loop (Linux's own limit)
TMPFS, CHECKED = "tmpfs", "checked"  # the two kinds of workspace quota
FULL = (errno.ENOSPC, errno.EDQUOT)


@dataclass(frozen=True)
class Isolation:
    """How commands are contained on this machine. ``mode``: root, userns or none. ``quota``: ``tmpfs``
    (the workspace is a tmpfs of ``workspace_mb``) or ``checked`` (its total is checked after each tool
    call), with ``quota_note`` saying why there is no tmpfs."""

    mode: str
    notes: tuple[str, ...] = ()
    quota: str = CHECKED
    quota_note: str = ""

    @property
    def namespaces(self) -> bool:
        return self.mode != "none"

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "network_isolated": self.namespaces,
            "pid_namespace": self.namespaces,
            "readonly_root": self.namespaces,
            "notes": list(self.notes),
            "quota": self.quota,
            "quota_note": self.quota_note,
        }

    def summary(self) -> str:
        """One line for people: the mode, and which workspace quota is in force."""
        quota = "a tmpfs of workspace_mb" if self.quota == TMPFS else "checked after each tool call"
        return f"sandbox: {self.mode}; workspace quota: {quota}" + (f" ({self.quota_note})" if self.quota_note else "")

    def quota_words(self, workspace_mb: int) -> str:
        """Which workspace quota is in force, in the words every episode records."""
        if self.quota == TMPFS:
            return f"tmpfs {workspace_mb} MB"
        return f"{workspace_mb} MB checked after each tool call"


@dataclass
class CommandResult:
    """One command's outcome. ``rc`` is None when it was killed (timeout or too much output)."""

    rc: int | None
    output: str
    seconds: float
    timed_out: bool = False
    output_overflow: bool = False
    total_bytes: int = 0
    cut_bytes: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "rc": self.rc,
            "seconds": round(self.seconds, 3),
            "timed_out": self.timed_out,
            "output_overflow": self.output_overflow,
            "total_bytes": self.total_bytes,
            "cut_bytes": self.cut_bytes,
        }


class ToolRefused(Exception):
    """A file tool refused a path; the message goes back to the model."""


def scrubbed_env(home: str) -> dict[str, str]:
    """No variable of ours gets through: keys, tokens, proxies and our own settings stay outside."""
    venv_bin = str(Path(sys.executable).parent)
    return {
        "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
        "TMPDIR": "/tmp",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "PAGER": "cat",
        "GIT_PAGER": "cat",
    }


def _safe_to_hide(paths: Sequence[Path]) -> list[Path]:
    """Never cover ``/`` or a folder holding the Python the sandbox runs."""
    keep = [Path(p) for p in python_paths()]
    out = []
    for p in (Path(h).resolve() for h in paths):
        if p != Path("/") and not any(k.is_relative_to(p) for k in keep):
            out.append(p)
    return out


def python_paths() -> list[str]:
    """Folders the sandbox user must reach to run our Python (the venv and its base install)."""
    return sorted({os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix)})


@functools.cache
def detect_isolation() -> Isolation:
    """Try the strongest mode this machine allows; fall back with a note saying what is missing."""
    candidates = (["root"] if os.geteuid() == 0 else []) + ["userns"]
    failures: list[str] = []
    for mode in candidates:
        reason = _probe(Isolation(mode))
        if reason is None:
            return _with_quota(mode)
        failures.append(f"{mode}: {reason}")
    note = (
        "namespaces unavailable (" + "; ".join(failures) + "): the network is NOT isolated, files outside "
        "the workspace are writable by this user, and processes that call setsid may outlive a command"
    )
    return Isolation("none", (note,), quota_note="no namespaces, so no tmpfs")


def _with_quota(mode: str) -> Isolation:
    """A tmpfs workspace where a probe command writes into one; else the checked total, saying why."""
    tmpfs = Isolation(mode, quota=TMPFS)
    reason = _probe(tmpfs, "echo ok > probe")
    return tmpfs if reason is None else Isolation(mode, quota_note=f"no tmpfs workspace: {reason}")


def _probe(iso: Isolation, command: str = "exit 0") -> str | None:
    with tempfile.TemporaryDirectory(prefix="frank-probe-") as d:
        try:
            with Sandbox(Path(d), SandboxLimits(workspace_mb=1), isolation=iso) as box:
                res = box.run(command, timeout_s=20)
        except SandboxError as exc:
            return str(exc)
        return None if res.rc == 0 else f"probe exited {res.rc}: {res.output.strip()[-300:]}"


class Sandbox:
    """Runs commands for one episode in ``workspace`` under ``limits``. With a tmpfs quota the work happens
    in the tmpfs (``self.workspace``) and :meth:`close` copies it back into ``folder``: use it as a context
    manager."""

    def __init__(
        self, workspace: Path, limits: SandboxLimits, *, hide: Sequence[Path] = (), isolation: Isolation | None = None
    ) -> None:
        self.folder = self.workspace = Path(workspace).resolve()
        self.limits = limits
        self.hide = [str(p) for p in _safe_to_hide(hide)]
        self.isolation = isolation or detect_isolation()
        self.mode = self.isolation.mode
        self.env = scrubbed_env("/tmp" if self.mode != "none" else str(self.workspace))
        self.view = VIEW_WS if self.mode != "none" else str(self.workspace)
        self.uid = own_uid() if self.mode == "root" else os.getuid()
        self.root_fd: int | None = None
        self.left_behind = 0  # entries of the tmpfs not copied back (see tmpfs.copy_tree)
        if self.isolation.quota == TMPFS:
            if not self.isolation.namespaces:
                raise SandboxError("a tmpfs workspace needs namespaces: without them commands would not see it")
            self._enter_tmpfs()
        self.give_to_sandbox(self.workspace)

    # -- the tmpfs workspace ---------------------------------------------------------------------
    def _enter_tmpfs(self) -> None:
        """Make the tmpfs, copy the seeded folder into it, and work there from now on."""
        mb = self.limits.workspace_mb
        try:
            fd = detached_tmpfs(mb, self.uid, self.uid) if self.mode == "root" else tmpfs_in_userns(mb)
        except OSError as exc:
            raise SandboxError(f"cannot make the workspace tmpfs: {exc.strerror or exc}") from exc
        self._release = weakref.finalize(self, os.close, fd)
        try:
            copy_tree(self.folder, fd_path(fd))
        except OSError as exc:
            self._release()
            full = exc.errno in FULL
            raise SandboxError(
                f"the task's workspace does not fit its quota of {mb} MB" if full else f"cannot seed the tmpfs: {exc}"
            ) from exc
        self.root_fd, self.workspace = fd, fd_path(fd)

    def close(self) -> None:
        """Copy what the agent left back into the episode's folder, then free the tmpfs (no-op without one)."""
        if self.root_fd is None:
            return
        try:
            shutil.rmtree(self.folder)
            self.folder.mkdir()
            self.left_behind = copy_tree(self.workspace, self.folder, strict=False)
        except OSError as exc:
            raise SandboxError(f"cannot copy the workspace back into {self.folder}: {exc}") from exc
        finally:
            self._release()
            self.root_fd, self.workspace = None, self.folder

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def quota_words(self) -> str:
        return self.isolation.quota_words(self.limits.workspace_mb)

    def record(self) -> dict[str, Any]:
        """What every episode records about its sandbox: the isolation and the quota in force."""
        return {**self.isolation.as_dict(), "workspace_quota": self.quota_words(), "not_copied_back": self.left_behind}

    # -- commands --------------------------------------------------------------------------------
    def run(self, command: str, timeout_s: float) -> CommandResult:
        """``bash -c command`` in the workspace."""
        return self.run_argv(["/bin/bash", "-c", command], timeout_s)

    def run_argv(self, argv: Sequence[str], timeout_s: float, binds: Sequence[tuple[Path, str]] = ()) -> CommandResult:
        """Run ``argv`` in the jail; ``binds`` are (real folder, path seen inside) mounted read-only."""
        read_end, write_end = os.pipe()
        cfg = self._jail_config(binds, write_end)
        keep = (write_end,) if self.root_fd is None else (write_end, self.root_fd)
        cmd = [sys.executable, "-I", "-S", str(JAIL), json.dumps(cfg), "--", *argv]
        t0 = time.monotonic()
        try:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
                pass_fds=keep,
                cwd=self.folder,
            )
        except OSError as exc:
            os.close(read_end)
            raise SandboxError(f"cannot start the sandbox launcher: {exc}") from exc
        finally:
            os.close(write_end)
        ns_pid1, ready = _read_report(read_end)
        try:
            collected = _collect(proc, t0 + timeout_s, self.limits)
        finally:
            _kill_tree(proc, ns_pid1)
        if not ready:
            said = collected.text(self.limits.output_chars).strip()
            raise SandboxError(said.splitlines()[-1] if said else f"sandbox launcher exited {proc.returncode}")
        return self._result(proc, collected, time.monotonic() - t0)

    def _jail_config(self, binds: Sequence[tuple[Path, str]], report_fd: int) -> dict[str, Any]:
        lim = self.limits
        rlimits = {
            "cpu": lim.cpu_s,
            "as": lim.memory_mb << 20,
            "fsize": lim.file_size_mb << 20,
            "nproc": lim.processes,
            "nofile": lim.open_files,
            "core": 0,
        }
        if self.mode == "none":
            # Without a user namespace the count is of all this user's processes on the machine.
            rlimits["nproc"] = processes_of(os.getuid()) + lim.processes
        return {
            "mode": self.mode,
            "workspace": str(self.workspace),
            "workspace_fd": self.root_fd,
            "hide": self.hide,
            "rlimits": rlimits,
            "binds": [[str(src), dst, True] for src, dst in binds],
            "python": python_paths(),
            "uid": self.uid,
            "gid": self.uid,
            "tmp_mb": lim.tmp_mb,
            "tmp_inodes": inodes_for(lim.tmp_mb),  # empty files take no bytes: uncounted, only memory bounds them
            "report_fd": report_fd,
            "parent": os.getpid(),
        }

    def _result(self, proc: subprocess.Popen[bytes], c: _Collected, seconds: float) -> CommandResult:
        rc = None if (c.timed_out or c.overflow) else proc.returncode
        text = c.text(self.limits.output_chars)
        notes = []
        if c.timed_out:
            notes.append(f"[timed out after {seconds:.0f} s; every process of the command was killed]")
        if c.overflow:
            notes.append(f"[output passed {self.limits.max_output_bytes} bytes; the command was killed]")
        if notes:
            text = text + ("\n" if text and not text.endswith("\n") else "") + "\n".join(notes)
        return CommandResult(
            rc=rc,
            output=text,
            seconds=seconds,
            timed_out=c.timed_out,
            output_overflow=c.overflow,
            total_bytes=c.total,
            cut_bytes=c.cut,
        )

    # -- files -----------------------------------------------------------------------------------
    def resolve(self, rel: str) -> Path:
        """The real path for a path the model gave; refuses anything outside the workspace, and anything the
        file system would refuse (a NUL, text that is not UTF-8, a name past 255 bytes, a symlink loop)."""
        check_path_text(rel)
        p = PurePosixPath(rel)
        if p.is_absolute():
            try:
                p = p.relative_to(self.view)
            except ValueError:
                raise ToolRefused(f"{rel}: outside the workspace ({self.view})") from None
        if ".." in p.parts:
            raise ToolRefused(f"{rel}: '..' is not allowed in paths")
        return self.workspace.joinpath(*self._walk(rel, list(p.parts)))

    def _walk(self, rel: str, todo: list[str]) -> list[str]:
        """The path's names below the workspace with every symlink followed, as the command would see them:
        an absolute target counts from the workspace's view, and none may lead out. Done by hand because the
        tmpfs workspace is reached through ``/proc/self/fd``, which ``realpath`` would leave."""
        parts: list[str] = []
        todo.reverse()
        links = 0
        while todo:
            name = todo.pop()
            if name in ("", "."):
                continue
            if name == "..":
                if not parts:
                    raise ToolRefused(f"{rel}: resolves outside the workspace")
                parts.pop()
                continue
            target = _link_target(self.workspace.joinpath(*parts, name))
            if target is None:
                parts.append(name)
                continue
            links += 1
            if links > MAX_LINKS:
                raise ToolRefused(f"{rel}: cannot be resolved (a symlink loop)")
            if target.is_absolute():
                parts, target = [], self._inside_view(rel, target)
            todo += reversed(target.parts)
        return parts

    def _inside_view(self, rel: str, target: PurePosixPath) -> PurePosixPath:
        try:
            return target.relative_to(self.view)
        except ValueError:
            raise ToolRefused(f"{rel}: resolves outside the workspace") from None

    def read_file(self, rel: str) -> str:
        """A regular file's text (cut in the middle past the output limit). Opened without following a link
        and without blocking (a FIFO is refused, never waited on)."""
        path = self.resolve(rel)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            raise ToolRefused(f"{rel}: {_why(exc)}") from None
        with os.fdopen(fd, "rb") as f:
            _regular(rel, fd)
            data = f.read(self.limits.max_output_bytes + 1)
        return cut_middle(data, self.limits.output_chars)

    def write_file(self, rel: str, content: str) -> int:
        """Write UTF-8 ``content`` to a regular file in the workspace, within the file size limit and the
        workspace quota. Opened without following a link and without blocking: a FIFO, socket or device
        is refused at once (``write_file`` onto a FIFO blocked past the episode's wall time)."""
        path = self.resolve(rel)
        if path == self.workspace or path.is_dir():
            raise ToolRefused(f"{rel}: is a folder")
        if path.exists() and not path.is_file():
            raise ToolRefused(f"{rel}: not a regular file (a FIFO, socket or device is never opened)")
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ToolRefused(f"the content is not valid text ({exc.reason} at character {exc.start})") from None
        if len(data) > self.limits.file_size_mb << 20:
            raise ToolRefused(f"{rel}: larger than the file size limit ({self.limits.file_size_mb} MB)")
        if self.root_fd is None:
            self.check_quota(len(data))
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except OSError as exc:
            raise ToolRefused(self._refusal(rel, exc)) from None
        try:
            _regular(rel, fd)
            os.ftruncate(fd, 0)
            _write_or_empty(fd, data)
        except OSError as exc:
            raise ToolRefused(self._refusal(rel, exc) + " (the file was left empty)") from None
        finally:
            os.close(fd)
        self.give_to_sandbox(self.workspace)
        return len(data)

    def _refusal(self, rel: str, exc: OSError) -> str:
        """An OS error as the model reads it; a full tmpfs names the quota."""
        if exc.errno in FULL and self.root_fd is not None:
            return f"{rel}: no space left: the workspace is full (its quota: {self.quota_words()})"
        return f"{rel}: {_why(exc)}"

    def workspace_bytes(self, stop_above: int | None = None) -> int:
        """Bytes the workspace holds on disk (each inode once); counting stops past ``stop_above``."""
        total, seen = 0, set()
        for root, dirs, files in os.walk(self.workspace):
            for name in [*dirs, *files]:
                try:
                    st = os.lstat(os.path.join(root, name))
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += max(st.st_blocks * 512, 0)
            if stop_above is not None and total > stop_above:
                break
        return total

    def quota_problem(self) -> str | None:
        """Why the workspace is over its quota (``limits.workspace_mb``), or None. A tmpfs never is: the
        file system refuses the write instead."""
        if self.root_fd is not None:
            return None
        quota = self.limits.workspace_mb << 20
        used = self.workspace_bytes(stop_above=quota)
        if used <= quota:
            return None
        return f"the workspace holds more than its quota of {self.limits.workspace_mb} MB"

    def check_quota(self, adding: int) -> None:
        quota = self.limits.workspace_mb << 20
        if self.workspace_bytes(stop_above=quota) + adding > quota:
            raise ToolRefused(f"writing {adding} bytes would pass the workspace quota of {self.limits.workspace_mb} MB")

    def give_to_sandbox(self, folder: Path) -> None:
        """As root, commands run as an unprivileged uid: the workspace must be theirs."""
        if self.mode != "root":
            return
        for root, dirs, files in os.walk(folder):
            for name in [*dirs, *files]:
                os.lchown(os.path.join(root, name), self.uid, self.uid)
        os.chown(folder, self.uid, self.uid)  # the folder itself is resolved (or the tmpfs's /proc/self/fd link)


# ---------------------------------------------------------------- output and process life


@dataclass
class _Collected:
    head: bytearray = field(default_factory=bytearray)
    tail: bytearray = field(default_factory=bytearray)
    total: int = 0
    cut: int = 0
    timed_out: bool = False
    overflow: bool = False

    def add(self, chunk: bytes, keep: int) -> None:
        self.total += len(chunk)
        room = keep // 2 - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        if len(self.tail) > 2 * keep:
            del self.tail[: len(self.tail) - keep // 2]

    def text(self, keep: int) -> str:
        if self.total <= keep:
            return (bytes(self.head) + bytes(self.tail)).decode("utf-8", errors="replace")
        tail = bytes(self.tail[-(keep // 2) :])
        self.cut = self.total - len(self.head) - len(tail)
        return _joined(bytes(self.head), tail, self.cut, self.total)


def cut_middle(data: bytes, keep: int) -> str:
    """Keep the first and last ``keep // 2`` bytes, with a note saying how much was cut."""
    if len(data) <= keep:
        return data.decode("utf-8", errors="replace")
    half = keep // 2
    return _joined(data[:half], data[-half:], len(data) - 2 * half, len(data))


def _joined(head: bytes, tail: bytes, cut: int, total: int) -> str:
    note = f"\n[... {cut} bytes cut from the middle ({total} bytes in all) ...]\n"
    return head.decode("utf-8", errors="replace") + note + tail.decode("utf-8", errors="replace")


def own_uid() -> int:
    """A uid no other sandbox uses now: from this process's own range (by pid), one per sandbox; ``nobody``
    where our user namespace does not map that range (a container's root may map only 65,536 uids)."""
    uid = UID_BASE + (os.getpid() % 4_000_000) * UIDS_PER_PROCESS + next(_SANDBOXES) % UIDS_PER_PROCESS
    return uid if _mapped(uid) else SANDBOX_UID


def _mapped(uid: int) -> bool:
    try:
        lines = Path("/proc/self/uid_map").read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        inside, _, count = (int(x) for x in line.split())
        if inside <= uid < inside + count:
            return True
    return False


def check_path_text(rel: str) -> None:
    """Refuse a path the file system cannot take, as a tool error: empty, a NUL, a lone surrogate (not
    UTF-8), a name longer than 255 bytes or a path longer than 4,096."""
    if not rel:
        raise ToolRefused("empty path")
    if "\x00" in rel:
        raise ToolRefused("a path may not hold a NUL byte")
    try:
        raw = rel.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolRefused(f"the path is not valid text ({exc.reason} at character {exc.start})") from None
    if len(raw) > MAX_PATH_BYTES or any(len(part) > MAX_NAME_BYTES for part in raw.split(b"/")):
        raise ToolRefused(f"path too long: names are at most {MAX_NAME_BYTES} bytes, paths {MAX_PATH_BYTES}")


def _link_target(path: Path) -> PurePosixPath | None:
    """Where the symlink at ``path`` points, or None when it is not one (or is missing: it may be created)."""
    try:
        return PurePosixPath(os.readlink(path))
    except OSError:
        return None


def _write_or_empty(fd: int, data: bytes) -> None:
    """Write all of ``data``; on a failure (a full file system) leave the file empty, not cut."""
    try:
        write_all(fd, data)
    except OSError:
        os.ftruncate(fd, 0)
        raise


def _regular(rel: str, fd: int) -> None:
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        raise ToolRefused(f"{rel}: not a regular file (a FIFO, socket or device is never opened)")


def _why(exc: BaseException) -> str:
    """An OS error's words without the path (the model gave the path; it is in the message already)."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return "a symlink loop" if "loop" in str(exc).lower() else str(exc)


def processes_of(uid: int) -> int:
    """How many processes ``uid`` runs now (from /proc)."""
    n = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                n += os.stat(entry.path).st_uid == uid
            except OSError:
                pass
    return n


def _read_report(fd: int) -> tuple[int | None, bool]:
    """The launcher's report: the host pid of the namespace's PID 1 (none in mode none), and
    whether setup finished (``ready``). Returns at EOF, which comes at ``exec`` or on failure."""
    pid, ready = None, False
    with os.fdopen(fd, "rb") as f:
        for line in f:
            word, _, arg = line.decode().strip().partition(" ")
            if word == "pid" and arg.isdigit():
                pid = int(arg)
            ready = ready or word == "ready"
    return pid, ready


def _collect(proc: subprocess.Popen[bytes], deadline: float, limits: SandboxLimits) -> _Collected:
    """Read merged stdout/stderr until EOF, the deadline, or too much output."""
    assert proc.stdout is not None
    c = _Collected()
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    exited_at: float | None = None
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if now >= deadline:
                c.timed_out = True
                break
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > 0.5:
                break  # the command is done; a leftover holding the pipe is killed below
            if not sel.select(min(deadline - now, 0.1)):
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            c.add(chunk, limits.output_chars)
            if c.total > limits.max_output_bytes:
                c.overflow = True
                break
    return c


def _kill_tree(proc: subprocess.Popen[bytes], ns_pid1: int | None) -> None:
    """Kill the namespace's PID 1 (the kernel then kills everything in it, and the launcher exits
    only once the namespace is empty), then the launcher's whole process group."""
    if ns_pid1 is not None and proc.poll() is None:
        _signal(lambda: os.kill(ns_pid1, signal.SIGKILL))
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    _signal(lambda: os.killpg(proc.pid, signal.SIGKILL))
    proc.wait()
    _wait_group_gone(proc.pid, limit_s=2.0)
    if proc.stdout is not None:
        proc.stdout.close()


def _wait_group_gone(pgid: int, limit_s: float) -> None:
    """Return once no live (non-zombie) process of the group is left: SIGKILL takes effect a moment
    after it is sent. Bounded, so a stuck process cannot hang the loop."""
    end = time.monotonic() + limit_s
    while _group_alive(pgid) and time.monotonic() < end:
        time.sleep(0.01)


def _group_alive(pgid: int) -> bool:
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"{entry.path}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False


def _signal(send: Any) -> None:
    try:
        send()
    except (ProcessLookupError, PermissionError):
        pass


def remove_tree(path: Path) -> None:
    """Remove a finished episode's folder (files may belong to the sandbox uid; we are root then)."""
    shutil.rmtree(path, ignore_errors=True)
