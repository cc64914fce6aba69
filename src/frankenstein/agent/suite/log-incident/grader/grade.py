"""Grader for log-incident: compares answer.json with answers computed from a fresh copy of the log."""

import json
import sys
import tempfile
from pathlib import Path

import loggen


def main(workspace):
    answer_file = Path(workspace) / "answer.json"
    if not answer_file.is_file():
        print("FAIL: no answer.json in the workspace")
        return 1
    try:
        answer = json.loads(answer_file.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        print(f"FAIL: answer.json is not JSON ({exc})")
        return 1
    if not isinstance(answer, dict):
        print("FAIL: answer.json is not a JSON object")
        return 1
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "service.log"
        loggen.generate(log, loggen.SEED)
        want = loggen.expected(log)
    wrong = [k for k in want if answer.get(k) != want[k]]
    for key in want:
        print(f"{'ok   ' if key not in wrong else 'FAIL '}{key}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
