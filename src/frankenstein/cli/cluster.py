"""``frank cluster local``: a Ray cluster of several hosts on this machine, in a private network namespace, to
try ``frank run --ray`` without a second workstation; started and stopped by frank, touching nothing else."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from frankenstein.cli.app import app

if TYPE_CHECKING:
    from frankenstein.cluster.local import LocalCluster

cluster_app = typer.Typer(help="Ray clusters for frank run --ray.", no_args_is_help=True)
app.add_typer(cluster_app, name="cluster")


@cluster_app.command("local", context_settings={"allow_interspersed_args": False})
def local(
    command: list[str] = typer.Argument(
        None, help="A command to run inside the cluster's namespace (RAY_ADDRESS set); the cluster stops after it."
    ),
    hosts: int = typer.Option(3, "--hosts", min=1, max=8, help="Ray nodes, each a host that runs one block."),
) -> None:
    """Start a loopback Ray cluster of --hosts nodes in a network namespace of its own; run COMMAND inside it
    (or wait for Ctrl-C), then stop every process in that namespace and nothing else (unlike `ray stop`, which
    stops every Ray process of the machine).

    Example: frank cluster local --hosts 3 -- frank run draft-vs-base-1 -c my-campaign --ray auto
    """
    from frankenstein.cluster.need import need_ray

    need_ray()
    from frankenstein.cluster.local import LocalCluster

    root = Path(tempfile.mkdtemp(prefix="fr-", dir="/tmp"))  # short: Ray's socket paths stay under 107 chars
    lc = LocalCluster(root)
    try:
        lc.start([f"host{i + 1}" for i in range(hosts)])
        assert lc.holder is not None
        typer.echo(
            f"local Ray cluster: {hosts} host(s) at {lc.address}, in a private network namespace (holder pid "
            f"{lc.holder.pid}); all {hosts} share this machine's cores, so their blocks compete for them",
            err=True,
        )
        code = _run_inside(lc, command) if command else _wait(lc)
    finally:
        left = len(lc.processes()) if lc.holder is not None else 0
        lc.stop()
        shutil.rmtree(root, ignore_errors=True)
        typer.echo(
            f"local Ray cluster stopped: {left} process(es) in its namespace ended, nothing outside it", err=True
        )
    raise typer.Exit(code)


def _run_inside(lc: LocalCluster, command: list[str]) -> int:
    argv = lc.command(command)
    typer.echo(f"running inside it: {shlex.join(command)}", err=True)
    return subprocess.run(argv, env={**os.environ, "RAY_ADDRESS": lc.address}).returncode


def _wait(lc: LocalCluster) -> int:
    assert lc.holder is not None
    typer.echo(
        f"enter it from another shell: RAY_ADDRESS={lc.address} nsenter -t {lc.holder.pid} -n "
        "frank run ID -c CAMPAIGN --ray auto   (Ctrl-C here stops the cluster)",
        err=True,
    )
    threading.Event().wait()
    return 0
