"""The real ``frank`` entry point run in this process: for tests with many cheap cases, where a subprocess
per case would cost seconds each. Signal handlers the CLI installs are put back after each call."""

from __future__ import annotations

import signal

from frankenstein.cli import main


def cli(capsys, *args: str) -> tuple[int, str, str]:
    """Run ``frank ARGS`` in-process; returns (exit code, stdout, stderr) as captured by ``capsys``."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
    out = capsys.readouterr()
    return code, out.out, out.err
