"""Process life of an engine: launch in its own process group, wait until ready, stop, always reap.

No engine outlives the ``frank`` process that started it:
- the child is started in a new session (its own process group) with a parent-death signal
  (``PR_SET_PDEATHSIG`` = SIGKILL), so ``kill -9`` of ``frank`` kills the engine too;
- every live engine has a pid file in the runtime directory; :func:`reap_leftovers` kills groups whose
  owner is gone (a second line of defence, e.g. for engines started through a wrapper script);
- :meth:`EngineProcess.stop` sends SIGTERM to the group, SIGKILL after a grace period, and waits.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from frankenstein.engines.http import Answer, TransportError, fetch_url
from frankenstein.errors import EngineStartError

PR_SET_PDEATHSIG = 1


def runtime_dir() -> Path:
    d = Path(os.environ.get("FRANK_RUNTIME_DIR") or Path.home() / ".cache" / "frankenstein" / "engines")
    d.mkdir(parents=True, exist_ok=True)
    return d


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def _child_setup(parent_pid: int) -> Callable[[], None]:
    def setup() -> None:
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except OSError:
            pass
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return setup


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_leftovers() -> list[int]:
    """Kill engine process groups whose owning ``frank`` process is gone; return their pids."""
    killed = []
    for f in runtime_dir().glob("*.json"):
        try:
            info = json.loads(f.read_text())
        except (OSError, ValueError):
            f.unlink(missing_ok=True)
            continue
        if _alive(info["owner"]):
            continue
        if _alive(info["pid"]):
            try:
                os.killpg(info["pgid"], signal.SIGKILL)
                killed.append(info["pid"])
            except ProcessLookupError:
                pass
        f.unlink(missing_ok=True)
    return killed


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class EngineProcess:
    """One engine process life (a *start*)."""

    def __init__(self, argv: list[str], *, env: dict[str, str], log_path: Path, name: str) -> None:
        self.argv = argv
        self.env = env
        self.log_path = log_path
        self.name = name
        self.proc: subprocess.Popen[bytes] | None = None
        self._pidfile: Path | None = None

    def launch(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                start_new_session=True,
                preexec_fn=_child_setup(os.getpid()),
            )
        except OSError as exc:
            raise EngineStartError(f"{self.name}: cannot execute {self.argv[0]}: {exc.strerror}") from exc
        finally:
            log.close()
        self._pidfile = runtime_dir() / f"{self.proc.pid}.json"
        self._pidfile.write_text(
            json.dumps({"pid": self.proc.pid, "pgid": self.proc.pid, "owner": os.getpid(), "argv": self.argv[:3]})
        )

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def wait_ready(self, url: str, timeout_s: float, ok: Callable[[Answer], bool]) -> float:
        """Poll ``url`` until ``ok(answer)``; return seconds waited. Raises with the log tail if it dies."""
        t0 = time.monotonic()
        delay = 0.02
        while True:
            code = self.exited()
            if code is not None:
                raise EngineStartError(
                    f"{self.name} exited with code {code} during start (log: {self.log_path})",
                    log_tail=log_tail(self.log_path),
                )
            try:
                if ok(fetch_url(url, timeout_s=5.0)):
                    return time.monotonic() - t0
            except TransportError:
                pass
            if time.monotonic() - t0 > timeout_s:
                raise EngineStartError(
                    f"{self.name} was not ready after {timeout_s:.0f} s (log: {self.log_path})",
                    log_tail=log_tail(self.log_path),
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 0.25)

    def stop(self, grace_s: float = 10.0) -> int | None:
        """SIGTERM to the whole group, SIGKILL after ``grace_s``; always waits for the child."""
        if self.proc is None:
            return None
        try:
            if self.proc.poll() is None:
                _killpg(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(timeout=grace_s)
                except subprocess.TimeoutExpired:
                    pass
            _killpg(self.proc.pid, signal.SIGKILL)  # stragglers in the group
            code = self.proc.wait()
            wait_group_gone(self.proc.pid)
            return code
        finally:
            if self._pidfile is not None:
                self._pidfile.unlink(missing_ok=True)


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group, read from /proc."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            fields = (p / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(p.name))
    return out


def wait_group_gone(pgid: int, timeout_s: float = 15.0) -> list[int]:
    """After SIGKILL, grandchildren (engine workers) take a moment to exit; wait until the group is
    empty, killing again, and return whoever is left after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    left = group_members(pgid)
    while left and time.monotonic() < deadline:
        _killpg(pgid, signal.SIGKILL)
        time.sleep(0.05)
        left = group_members(pgid)
    return left


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
