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
    """frank's, Python's and the engines' versions, found without starting or importing an engine:
    ``llama-server --version`` where a binary is found; vLLM's and SGLang's versions read as text from their
    installed source, in the interpreter each adapter would launch (vLLM: ``$FRANK_VLLM_PYTHON``, else
    ``./.venv-vllm``; SGLang: ``$FRANK_SGLANG_PYTHON``), else this one."""
    import platform
    import sys

    from frankenstein import __version__

    return [
        f"frank {__version__}",
        f"Python {platform.python_version()} ({sys.executable})",
        _llama_server_line(),
        _vllm_line(),
        _sglang_line(),
    ]


def _llama_server_line() -> str:
    from frankenstein.engines.llamacpp import binary_version, find_llama_server
    from frankenstein.errors import EngineError

    try:
        server = find_llama_server()
    except EngineError as exc:
        return f"llama-server: {exc}"
    return f"llama-server {binary_version(server)} ({server})"


def _vllm_line() -> str:
    from frankenstein.engines.vllm import package_dir, source_version, vllm_python_and_source
    from frankenstein.errors import EngineError

    try:
        python, source = vllm_python_and_source()
        return f"vLLM {source_version(package_dir(python))} ({python}, from {source})"
    except EngineError as exc:
        return _in_this_python("vllm", "vLLM") or f"vLLM: {str(exc).split(';')[0]}"


def _sglang_line() -> str:
    from frankenstein.engines.sglang import PYTHON_ENV, find_sglang_python, installed_version
    from frankenstein.errors import EngineError

    try:
        python = find_sglang_python()
        return f"SGLang {installed_version(python)} ({python}, from {PYTHON_ENV})"
    except EngineError as exc:
        return _in_this_python("sglang", "SGLang") or f"SGLang: not installed ({str(exc).split(';')[0]})"


def _in_this_python(package: str, name: str) -> str | None:
    """``NAME VERSION (this interpreter)`` where ``package`` is installed beside frank, else None."""
    import importlib.util
    import sys
    from pathlib import Path

    from frankenstein.engines.vllm import source_version

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return f"{name} {source_version(Path(list(spec.submodule_search_locations)[0]))} ({sys.executable})"


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
