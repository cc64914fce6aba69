"""Grader for todo-feature: hidden tests drive the real command line."""

import sys
from pathlib import Path

from harness import run_hidden_tests

if __name__ == "__main__":
    sys.exit(run_hidden_tests(sys.argv[1], str(Path(__file__).with_name("hidden_tests.py"))))
