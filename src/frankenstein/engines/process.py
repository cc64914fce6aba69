"""Process life of an engine: launch in its own process group, wait until ready, stop, always reap.

No engine outlives the ``frank`` process that started it:
- the child is started in a new session (its own process group) with a parent-death signal
  (``PR_SET_PDEATHSIG`` = SIGKILL), so ``kill -9`` of ``frank`` kills the engine too;
- every live engine has a pid file in the runtime directory (renamed into place whole, :func:`write_pid_file`);
  :func:`reap_leftovers` kills groups whose owner is gone (a second line of defence, e.g. for engines
  started through a wrapper script);
- :meth:`EngineProcess.stop` sends SIGTERM to the group, SIGKILL after a grace period, and waits;
- every process of a start carries a token in its environment (:data:`TOKEN_VAR`), which a descendant keeps
  through ``setsid`` and double forks: the stop (and :func:`reap_leftovers`, for a start whose owner died)
  SIGKILLs every process that holds it, so a daemon an engine left outside its process group is reaped too
  (one that clears its own environment with ``execve`` is the exception: a cgroup would be needed).

Fast edges: readiness is polled from 2 ms, growing 1.5× to 10 ms (:data:`READY_POLL_S`), and every
100 ms once a start has waited 5 s, so a ready engine is seen within about one poll interval (median
5-7 ms, tests/test_phases_edges.py). The ready phase counts that wait as the engine's, so it is kept
short: at 250 ms a design of tiny starts lost ~5 % of its wall time to it. A poll is one loopback
request, and an engine not yet listening refuses it at once. The stop grace is the adapter's
(``stop_grace_s``: long enough for its clean shutdown, and no longer), and how the process ended is
kept in ``stopped_by`` (``SIGTERM``, ``SIGKILL`` or ``exited``).

Extra environment for a launch (:func:`launch_env`): the runner's per-arm cache folders
(:mod:`frankenstein.design.caches`) reach every engine process through it; the recipe's own ``env`` wins.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import secrets
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from frankenstein.engines.http import Answer, TransportError, fetch_url
from frankenstein.errors import EngineStartError

PR_SET_PDEATHSIG = 1
LONG_WAIT_S, LONG_POLL_S = 5.0, 0.1  # after 5 s of waiting, poll every 100 ms (≤ 2 % of such a start)
READY_POLL_S = (0.002, 1.5, 0.01)  # first interval, growth factor, largest: a ready engine is seen within ~10 ms
DEFAULT_STOP_GRACE_S = 10.0

_LAUNCH_ENV: ContextVar[dict[str, str] | None] = ContextVar("frank_launch_env", default=None)


@contextmanager
def launch_env(env: Mapping[str, str]) -> Iterator[None]:
    """Processes launched inside this context get ``env`` on top of ours (the recipe's env still wins)."""
    token = _LAUNCH_ENV.set({**(_LAUNCH_ENV.get() or {}), **env})
    try:
        yield
    finally:
        _LAUNCH_ENV.reset(token)


def extra_env() -> dict[str, str]:
    """The environment :func:`launch_env` adds to a launch now (empty outside one)."""
    return dict(_LAUNCH_ENV.get() or {})


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


SIGNAL_HINTS = {
    signal.SIGILL: "the binary ran a CPU instruction this machine does not execute (e.g. AMX tiles that a "
    "-march=native llama.cpp build uses and a VM traps: try llama.cpp's --no-repack, or a build with GGML_NATIVE=OFF)",
}


def exit_words(code: int) -> str:
    """``exited with code N``, or for a signal its name and, where one is known, what it usually means."""
    if code >= 0:
        return f"exited with code {code}"
    try:
        sig = signal.Signals(-code)
    except ValueError:
        return f"was killed by signal {-code}"
    hint = SIGNAL_HINTS.get(sig)
    return f"was killed by {sig.name}" + (f": {hint}" if hint else "")


def engine_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment an engine (or a command arm) starts with: frank's, less every ``RAY_*`` variable,
    plus ``RAY_ADDRESS=local``, so an engine that starts Ray of its own (vLLM) never joins the cluster
    frank's blocks run on. Stripping alone is not enough: ``ray.init()`` with no address (or ``"auto"``)
    then reads the address file every plain ``ray start`` writes (``ray_current_cluster`` under Ray's temp
    dir) and joins that cluster. ``RAY_ADDRESS`` wins over the file, and ``local`` means "start a private
    instance" (Ray 2.60: ``services.canonicalize_bootstrap_address`` returns None for it, and ``ray.init``
    starts a new head). A recipe's own ``env`` can still name a cluster on purpose."""
    source = os.environ if environ is None else environ
    return {**{k: v for k, v in source.items() if not k.startswith("RAY_")}, "RAY_ADDRESS": "local"}


# Variables the libraries under every engine read as settings: inherited from frank's shell, they change what runs
# without being in the recipe, so each start records those it inherited (:func:`inherited_settings`). An engine's
# own variables (llama.cpp reads a LLAMA_ARG_* for every flag) are its adapter's trait (``EngineTraits.settings``).
LIBRARY_SETTINGS = (
    "CUDA_",
    "NCCL_",
    "NVIDIA_",
    "HIP_",
    "ROCR_",
    "OMP_",
    "MKL_",
    "OPENBLAS_",
    "KMP_",
    "TORCH",
    "PYTORCH_",
    "TRITON_",
    "HF_",
    "TRANSFORMERS_",
    "TOKENIZERS_",
)
SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
REDACTED = "<redacted>"


def no_engine_setting(name: str) -> bool:
    return False


def inherited_settings(
    frank_sets: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
    engine_setting: Callable[[str], bool] = no_engine_setting,
) -> dict[str, str]:
    """The setting variables in frank's environment that a launch inherits (:data:`LIBRARY_SETTINGS`, and those
    ``engine_setting`` says are the engine's): the shell's state, the same for every arm (where a recipe's own
    ``env`` sets one of them, the recipe's value wins, and it is in the recipe). Names frank sets itself for the
    start (``frank_sets``: the cache folders of :func:`launch_env`) are left out, since the shell's value never
    reaches the engine. Values of names that look like credentials are ``<redacted>`` (a record never keeps one)."""
    source = os.environ if environ is None else environ
    own = frank_sets if frank_sets is not None else extra_env()
    return {
        k: REDACTED if any(w in k.upper() for w in SECRET_WORDS) else v
        for k, v in sorted(source.items())
        if (k.startswith(LIBRARY_SETTINGS) or engine_setting(k)) and k not in own
    }


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


TOKEN_VAR = "FRANK_PROCESS_TOKEN"


def new_token() -> str:
    """A fresh token for one start's processes (:data:`TOKEN_VAR`)."""
    return secrets.token_hex(12)


def token_holders(token: str) -> list[int]:
    """Live (non-zombie) processes whose environment at exec holds ``TOKEN_VAR=token``, from /proc."""
    needle = f"{TOKEN_VAR}={token}".encode()
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"{entry.path}/environ", "rb") as f:
                held = needle in f.read().split(b"\0")
            if held and not _zombie(entry.path):
                out.append(int(entry.name))
        except OSError:
            continue
    return out


def kill_token(token: str, timeout_s: float = 5.0) -> list[int]:
    """SIGKILL every process holding ``token`` until none is left; returns those still alive after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    left = token_holders(token)
    while left and time.monotonic() < deadline:
        for pid in left:
            _kill(pid)
        time.sleep(0.01)
        left = token_holders(token)
    return left


def _zombie(proc_dir: str) -> bool:
    with open(f"{proc_dir}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_pid_file(pid: int, argv: Sequence[str], token: str) -> Path:
    """The pid file of a start's process group ``pid``, owned by this process: written whole under another name,
    then renamed into place, so a reader (another frank's :func:`reap_leftovers`) finds no file or all of it. A
    file written in place is empty for a moment, and the reaper deletes a file it cannot read: a live engine
    lost its pid file that way."""
    path = runtime_dir() / f"{pid}.json"
    part = path.with_name(f"{pid}.json.part")  # not "*.json": no reader lists it
    info = {"pid": pid, "pgid": pid, "owner": os.getpid(), "argv": list(argv[:3]), "token": token}
    part.write_text(json.dumps(info))
    os.replace(part, path)
    return path


def reap_leftovers() -> list[int]:
    """Kill engine process groups whose owning ``frank`` process is gone; return their pids. A pid file still
    under its writing name (``*.json.part``: its owner was killed between the write and the rename) counts the
    same once whole; one not whole is left to its writer for a minute, then removed."""
    killed = []
    folder = runtime_dir()
    for f in [*folder.glob("*.json"), *folder.glob("*.json.part")]:
        try:
            info = json.loads(f.read_text())
        except (OSError, ValueError):
            if f.suffix == ".json" or _older_than(f, PART_GRACE_S):
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
        if info.get("token"):
            kill_token(str(info["token"]))
        f.unlink(missing_ok=True)
    return killed


PART_GRACE_S = 60.0  # a pid file being written is whole within microseconds; one not whole after this is a wreck


def _older_than(path: Path, seconds: float) -> bool:
    try:
        return time.time() - path.stat().st_mtime > seconds
    except OSError:
        return False


LAUNCH_PREFIX = "# frank launched: "  # the first line of every engine log (launch_line)
CAUSE_WORDS = ("error", "couldn't", "could not", "cannot", "can't", "failed", "address already in use", "invalid")
_LOG_PREFIX = re.compile(r"^\d+(\.\d+)+ [A-Z] +")  # llama.cpp's "0.00.022.701 E " time and level


def log_cause(tail: str) -> str | None:
    """The log line that most likely says why a start failed, for the error's first line: llama.cpp's first
    error-level line, else the first line with an error word; never a warning or a deprecation notice (a port
    clash read "… deprecated …" first, the bind failure three lines down), nor frank's own launch line (its
    command line may hold any word: a path with "failed" in it, ``--log-level error``)."""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    useful = [
        line
        for line in lines
        if "deprecat" not in line.lower() and not _level(line, "W") and not line.startswith(LAUNCH_PREFIX)
    ]
    found = next((line for line in useful if _level(line, "E")), None) or next(
        (line for line in useful if any(w in line.lower() for w in CAUSE_WORDS)), None
    )
    return " ".join(_LOG_PREFIX.sub("", found).split())[:240] if found else None


def _level(line: str, letter: str) -> bool:
    parts = line.split(maxsplit=2)
    return len(parts) > 2 and _LOG_PREFIX.match(line) is not None and parts[1] == letter


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def launch_line(argv: list[str]) -> bytes:
    """The first line of an engine log: the command line as launched (environment settings are in the start
    record), so the log alone says what ran."""
    return f"{LAUNCH_PREFIX}{shlex.join(argv)}\n".encode()


class EngineProcess:
    """One engine process life (a *start*)."""

    def __init__(self, argv: list[str], *, env: dict[str, str], log_path: Path, name: str) -> None:
        self.argv = argv
        self.env = env
        self.log_path = log_path
        self.name = name
        self.proc: subprocess.Popen[bytes] | None = None
        self._pidfile: Path | None = None
        self.ready_polls = 0
        self.stopped_by: str | None = None
        self.grace_s: float | None = None
        self.token = new_token()

    def launch(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        log.write(launch_line(self.argv))
        log.flush()
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**engine_env(), **extra_env(), **self.env, TOKEN_VAR: self.token},
                start_new_session=True,
                preexec_fn=_child_setup(os.getpid()),
            )
        except OSError as exc:
            raise EngineStartError(f"{self.name}: cannot execute {self.argv[0]}: {exc.strerror}") from exc
        finally:
            log.close()
        self._pidfile = write_pid_file(self.proc.pid, self.argv, self.token)

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def wait_ready(self, url: str, timeout_s: float, ok: Callable[[Answer], bool]) -> float:
        """Poll ``url`` until ``ok(answer)``; return seconds waited. Raises with the log tail if it dies."""
        t0 = time.monotonic()
        delay, growth, largest = READY_POLL_S
        self.ready_polls = 0
        while True:
            code = self.exited()
            if code is not None:
                tail = log_tail(self.log_path)
                cause = log_cause(tail)
                raise EngineStartError(
                    f"{self.name} {exit_words(code)} during start (log: {self.log_path})"
                    + (f": {cause}" if cause else ""),
                    log_tail=tail,
                )
            self.ready_polls += 1
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
            # a long load (a large model, vLLM) is polled less often: a poll interval is small beside it
            top = largest if time.monotonic() - t0 < LONG_WAIT_S else LONG_POLL_S
            delay = min(delay * growth, top)

    def stop(self, grace_s: float = DEFAULT_STOP_GRACE_S) -> int | None:
        """SIGTERM to the whole group, SIGKILL after ``grace_s``; always waits for the child."""
        if self.proc is None:
            return None
        self.grace_s = grace_s
        try:
            if self.proc.poll() is None:
                _killpg(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(timeout=grace_s)
                    self.stopped_by = self.stopped_by or "SIGTERM"
                except subprocess.TimeoutExpired:
                    self.stopped_by = "SIGKILL"
            else:
                self.stopped_by = self.stopped_by or "exited"
            _killpg(self.proc.pid, signal.SIGKILL)  # stragglers in the group
            code = self.proc.wait()
            wait_group_gone(self.proc.pid)
            kill_token(self.token)  # and those that left it (setsid)
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
