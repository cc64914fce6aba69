"""`frank demo`, the README's first command, end to end on the real CLI and the tiny shipped models."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.engine
def test_frank_demo_runs_the_whole_loop(tmp_path: Path, llama_server_bin: str) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path), "FRANK_LLAMA_SERVER": llama_server_bin}
    out = subprocess.run(
        [sys.executable, "-m", "frankenstein", "demo"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
        env=env,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    text = out.stdout
    assert re.search(r"registered draft-speed-\d+ \(seed [0-9a-f]+\)", text)
    assert "rule sign: at 5 blocks this rule confirms only if all 5 favour the candidate" in text
    assert re.search(r"^verdict: (confirmed|not confirmed|invalid) ", text, re.M)
    assert "candidate: drafted " in text  # speculation per arm
    # a part this machine may confirm (every core to the engine): adopted where it is confirmed, refused (naming
    # the verdict) where it is not, as on a shared machine; skipped on one core
    assert re.search(
        r"^(adopted: threads-all \(design threads-all-speed-1, ledger step 1\)|refused: adopt 'threads-all' on "
        r"design threads-all-speed-1: its verdict is '(not confirmed|invalid)'|skipped: 1 core\(s\))",
        text,
        re.M,
    ), text[-3000:]
    assert "refused: adopt 'draft' on design draft-speed-1: its verdict is" in text
    assert "decided by: " in text  # the fidelity gate says which part of its rule decided
    # 3 starts per arm: the floor and the candidate as ranges over start pairs, the excess with its bound
    assert "against the noise floor: two starts of the served engine differed by " in text
    assert re.search(r"excess \S+ nats, one-sided 95% upper bound \S+ [<≥] margin 0.01", text)
    note = re.search(r"^progress note: (.+)$", text, re.M)
    assert note and Path(note.group(1)).is_file()
    verify = subprocess.run(
        [sys.executable, "-m", "frankenstein", "verify", "-c", str(Path(note.group(1)).parents[2])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert verify.returncode == 0 and "evidence chain verified" in verify.stdout, verify.stdout + verify.stderr
