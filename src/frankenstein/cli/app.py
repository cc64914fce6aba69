"""The one typer application every CLI module adds its commands to."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="frank",
    help="Frankenstein: let an engine part in only through a registered, randomized, exact test.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def version_lines() -> list[str]:
    """frank's, Python's and the engines' versions, found without starting an engine: ``llama-server --version``
    where a binary is found, vLLM's version read from its installed source (``$FRANK_VLLM_PYTHON``, else this
    interpreter), never imported."""
    import importlib.util
    import platform
    import sys

    from frankenstein import __version__
    from frankenstein.engines.llamacpp import binary_version, find_llama_server
    from frankenstein.engines.vllm import PYTHON_ENV, find_vllm_python, package_dir, package_features
    from frankenstein.errors import EngineError

    lines = [f"frank {__version__}", f"Python {platform.python_version()} ({sys.executable})"]
    try:
        server = find_llama_server()
        lines.append(f"llama-server {binary_version(server)} ({server})")
    except EngineError as exc:
        lines.append(f"llama-server: {exc}")
    try:
        python = find_vllm_python()
        lines.append(f"vLLM {package_features(package_dir(python))['version']} ({python}, from {PYTHON_ENV})")
    except EngineError as exc:
        spec = importlib.util.find_spec("vllm")
        if spec is not None and spec.submodule_search_locations:
            from pathlib import Path

            pkg = Path(list(spec.submodule_search_locations)[0])
            lines.append(f"vLLM {package_features(pkg)['version']} ({sys.executable})")
        else:
            lines.append(f"vLLM: {str(exc).split(';')[0]}")
    return lines


def _print_version(value: bool) -> None:
    if value:
        for line in version_lines():
            typer.echo(line)
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        is_eager=True,
        callback=_print_version,
        help="Print frank's, Python's and the engines' versions (no engine is started) and exit.",
    ),
) -> None:
    """Frankenstein: let an engine part in only through a registered, randomized, exact test."""


def check_listen(value: str) -> str:
    """Typer callback for ``--listen``: ``HOST:PORT`` (or ``PORT``) with a port 0-65535, else a usage error (exit 2)."""
    _, _, port = value.rpartition(":")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise typer.BadParameter(f"{value!r}: expected HOST:PORT with a port from 0 to 65535", param_hint="--listen")
    return value
