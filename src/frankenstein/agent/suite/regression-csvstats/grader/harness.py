"""Hidden-test harness shared by the code tasks' graders (each grader holds its own copy).

The hidden tests run in a child process, so agent code that exits, hangs or crashes the
interpreter can only make tests fail, never end the grader with a pass. Output is deterministic:
one line per test and a count, nothing timed.
"""

import json
import os
import subprocess
import sys

MARK = "FRANK-RESULTS "
CHILD = r'''
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("hidden_tests", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
out = []
for name in sorted(n for n in dir(mod) if n.startswith("test_")):
    try:
        getattr(mod, name)()
        out.append([name, True, ""])
    except BaseException as exc:
        out.append([name, False, (type(exc).__name__ + ": " + str(exc))[:300]])
sys.stdout.flush()
print("\n" + "FRANK-RESULTS " + json.dumps(out))
'''


def run_hidden_tests(workspace, tests_file, timeout=60, extra_path=()):
    """Run every ``test_*`` function of ``tests_file`` with ``workspace`` on sys.path; exit code 0/1."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([workspace, *extra_path]))
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, tests_file], cwd=workspace, env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"FAIL: the hidden tests did not finish within {timeout} s")
        return 1
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(MARK)]
    if not lines:
        print(f"FAIL: the hidden tests could not run (exit {done.returncode})")
        print("\n".join(done.stderr.strip().splitlines()[-8:]))
        return 1
    results = json.loads(lines[-1][len(MARK):])
    failed = [r for r in results if not r[1]]
    for name, ok, msg in results:
        print(("ok   " if ok else "FAIL ") + name + ("" if ok else ": " + msg))
    print(f"{len(results) - len(failed)}/{len(results)} hidden tests passed")
    return 0 if results and not failed else 1
