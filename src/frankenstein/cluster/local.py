"""A Ray cluster of several nodes on this one machine, every listener on loopback: for tests, the
benchmark and trying ``--ray`` out (docs/cluster.md).

By default Ray advertises the machine's outward address and its GCS and raylets listen on every
interface, even with ``--node-ip-address 127.0.0.1`` (Ray turns that into the outward address). So the
nodes run inside a network namespace of their own that holds nothing but ``lo`` (``unshare --net``, with
a user namespace when not run as root, so no privilege is needed): there Ray finds no outward address and binds 127.0.0.1, and
no listener can be reached from outside. Commands that talk to the cluster (``frank run --ray``) run in
the same namespace (:meth:`LocalCluster.command`).

Each node is one ``ray start`` in its own process group with ``frank_host: 1``, one CPU, a small object
store and its own ``FRANK_WORKER_DIR`` / ``FRANK_RUNTIME_DIR`` (so a test sees each node's engine pid
files); :meth:`LocalCluster.stop` kills every process left in the namespace.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from frankenstein.engines.process import free_port
from frankenstein.errors import ClusterError

OBJECT_STORE_BYTES = 100 * 1024 * 1024
# The namespace's first process. It dies with the process that started it (PR_SET_PDEATHSIG), and when it
# is told to end (that signal, SIGTERM or SIGINT) it first kills every other process in its namespace: a
# killed ``frank cluster local`` (kill -9 included) leaves no Ray node behind, and touches nothing outside.
HOLDER = """
import ctypes, os, signal, sys
def end(*_):
    mine = os.readlink('/proc/self/ns/net')
    for p in os.listdir('/proc'):
        if p.isdigit() and int(p) != os.getpid():
            try:
                if os.readlink(f'/proc/{p}/ns/net') == mine:
                    os.kill(int(p), signal.SIGKILL)
            except OSError:
                pass
    os._exit(0)
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, end)
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
if os.getppid() != int(sys.argv[1]):
    end()
os.system('ip link set lo up')
print('up', flush=True)
while True:
    signal.pause()
"""


@dataclass
class Node:
    name: str
    pgid: int
    worker_dir: Path
    runtime_dir: Path


@dataclass
class LocalCluster:
    root: Path  # short: Ray's unix socket paths must stay under 107 characters
    holder: subprocess.Popen[bytes] | None = None
    port: int = 0
    nodes: list[Node] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run inside the cluster's network namespace."""
        assert self.holder is not None
        return ["nsenter", "-t", str(self.holder.pid), *_user_ns(["-U", "--preserve-credentials"]), "-n", *argv]

    def start(self, names: list[str]) -> LocalCluster:
        self.root.mkdir(parents=True, exist_ok=True)
        self.holder = subprocess.Popen(
            ["unshare", "--net", *_user_ns(["--map-current-user"]), sys.executable, "-c", HOLDER, str(os.getpid())],
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        assert self.holder.stdout is not None
        if self.holder.stdout.readline().strip() != b"up":
            raise ClusterError(
                f"cannot create a network namespace ({' '.join(['unshare', '--net', *_user_ns(['--map-current-user'])])})"
            )
        self.port = free_port()
        for i, name in enumerate(names):
            self.add_node(name, head=i == 0)
        return self

    def add_node(self, name: str, *, head: bool = False, host: bool = True) -> Node:
        """One more ``ray start``; ``host=False`` leaves out ``frank_host`` (a node that runs no blocks)."""
        node = Node(name, 0, self.root / name / "w", self.root / name / "rt")
        where = (
            ["--head", "--port", str(self.port), "--include-dashboard=false"] if head else ["--address", self.address]
        )
        argv = [
            str(Path(sys.executable).with_name("ray")),
            "start",
            *where,
            "--node-ip-address",
            "127.0.0.1",
            "--node-name",
            name,
            "--num-cpus",
            "1",
            "--resources",
            '{"frank_host": 1}' if host else "{}",
            "--object-store-memory",
            str(OBJECT_STORE_BYTES),
            "--temp-dir",
            str(self.root / "ray"),
            "--disable-usage-stats",
        ]
        env = {
            **os.environ,
            "FRANK_WORKER_DIR": str(node.worker_dir),
            "FRANK_RUNTIME_DIR": str(node.runtime_dir),
            "RAY_USAGE_STATS_ENABLED": "0",
        }
        log = open(self.root / f"{name}.log", "wb")
        with log:
            proc = subprocess.Popen(
                self.command(argv), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        node.pgid = proc.pid
        if proc.wait(timeout=120) != 0:
            raise ClusterError(f"ray start of node {name} failed: see {self.root / f'{name}.log'}")
        self.nodes.append(node)
        return node

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def processes(self) -> list[int]:
        """Every live (non-zombie) process inside the cluster's network namespace."""
        assert self.holder is not None
        mine = _netns(self.holder.pid)
        return [p for p in _pids() if p != self.holder.pid and _netns(p) == mine and not _zombie(p)]

    def stop(self) -> None:
        """Kill every process in the namespace (nodes, workers, engines), then the namespace."""
        if self.holder is None:
            return
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            left = self.processes()
            if not left:
                break
            for pid in left:
                _kill(pid)
            time.sleep(0.1)
        self.holder.kill()
        self.holder.wait()
        self.holder = None


def node_pids(node: Node, comm: str) -> list[int]:
    """Live processes of ``node``'s process group whose command name is ``comm`` (e.g. ``raylet``)."""
    out = []
    for pid in _pids():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        if name == comm and rest[0] != "Z" and int(rest[2]) == node.pgid:
            out.append(pid)
    return out


def _user_ns(flags: list[str]) -> list[str]:
    """A user namespace only where we are not root already: inside one, root could not give files to
    another uid (the agent sandbox's root mode needs that)."""
    return [] if os.geteuid() == 0 else flags


def _pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _netns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2 :].split()[0] == "Z"


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
