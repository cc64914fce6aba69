"""The ``frank`` command line: thin commands that parse, call one library function, and turn our
errors into one-line messages (exit 1; usage errors exit 2; Ctrl-C exits 130 after reaping engines)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence

import typer
from typer._click import exceptions as click_exc

from frankenstein.cli.app import app
from frankenstein.errors import FrankError

# Each module registers its commands on ``app`` when imported; each imports its library room lazily,
# inside the command, so ``frank --help`` stays fast.
from frankenstein.cli import agent, cluster, core, design, fidelity, ledger, runs, serve, workload  # noqa: F401


_interrupted: list[int] = []


def _interrupt(signum: int, frame: object) -> None:
    # Ctrl-C, SIGTERM and SIGHUP become KeyboardInterrupt so every ``finally`` (engine stop) runs.
    _interrupted.append(signum)
    raise KeyboardInterrupt(f"signal {signum}")


def _exit_interrupted() -> None:
    """Engines are already stopped (every start sits in a ``finally``); exit 130 without letting the
    interpreter turn a late KeyboardInterrupt into death by SIGINT."""
    print("frank: interrupted; engines stopped", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(130)


def foreign_message(exc: BaseException) -> str:
    """One line for an exception our rooms did not translate (the file where the OS names one)."""
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text ({exc.reason} at byte {exc.start})"
    if isinstance(exc, RecursionError):
        return "input nested too deeply to read"
    return f"{type(exc).__name__}: {exc} (unexpected; FRANK_DEBUG=1 shows the traceback, please report it)"


def main(argv: Sequence[str] | None = None) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    try:
        rv = app(args=list(argv) if argv is not None else None, standalone_mode=False, prog_name="frank")
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except click_exc.NoArgsIsHelpError as exc:
        exc.show()
        sys.exit(2)
    except click_exc.ClickException as exc:  # usage errors
        exc.show()
        sys.exit(2 if isinstance(exc, click_exc.UsageError) else 1)
    except (KeyboardInterrupt, typer.Abort):
        _exit_interrupted()
    except FrankError as exc:
        print(f"frank: error: {exc}", file=sys.stderr)
        sys.exit(1)
    except Exception as exc:  # a foreign error that escaped translation: still one line, never a traceback
        if os.environ.get("FRANK_DEBUG"):
            raise
        print(f"frank: error: {foreign_message(exc)}", file=sys.stderr)
        sys.exit(1)
    if _interrupted:  # typer turns KeyboardInterrupt into a return value of 130
        _exit_interrupted()
    sys.exit(rv if isinstance(rv, int) else 0)
