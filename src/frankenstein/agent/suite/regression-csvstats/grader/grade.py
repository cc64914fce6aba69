"""Grader for regression-csvstats: REGRESSION.txt names the function, and hidden tests check v2."""

import sys
from pathlib import Path

from harness import run_hidden_tests


def named_function(workspace):
    path = Path(workspace) / "REGRESSION.txt"
    if not path.is_file():
        return None
    lines = [ln.strip() for ln in path.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    if len(lines) != 1:
        return None
    return lines[0].strip("`'\" ").removesuffix("()").rsplit(".", 1)[-1]


def main(workspace):
    name = named_function(workspace)
    ok_name = name == "median"
    print(("ok   " if ok_name else "FAIL ") + "REGRESSION.txt names the regressed function")
    tests = str(Path(__file__).with_name("hidden_tests.py"))
    rc = run_hidden_tests(workspace, tests, subdir="v2")
    if rc not in (0, 1):
        return rc  # the hidden tests did not complete: not a pass, not a plain fail
    return 0 if ok_name and rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
