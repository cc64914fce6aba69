"""Hidden-test harness shared by the code tasks' graders (each grader holds its own copy, kept
identical by a test, so the task hash covers the harness too).

Why it cannot be forged from the workspace:

* The hidden tests run in a child interpreter the workspace cannot configure: ``-s -S -P -B``
  (no user site, no site-packages and their ``.pth`` files, no ``sitecustomize``/``usercustomize``,
  no script folder or cwd on ``sys.path``) and an environment rebuilt here from an allowlist (no
  ``PYTHONPATH``, ``PYTHONSTARTUP``, ``PYTHONHOME``...; ``PYTHONHASHSEED=0`` keeps runs repeatable).
* The workspace is imported from a fresh copy, by path, and its folder is *appended* to
  ``sys.path``: a workspace ``json.py``, ``unittest/`` or ``datetime.py`` never shadows the standard
  library. pytest is not used (no ``conftest.py``, no plugins).
* Results come back through a private pipe, not stdout or stderr, and must carry the per-run nonce
  sent on the child's stdin, name every hidden test exactly once and end with ``done``. Lines printed
  on stdout or stderr are never read as results.
* This grader process makes itself non-dumpable, so code run by the tests cannot open its
  ``/proc`` files (file descriptors, memory) to change its exit status.

Exit codes: 0 every hidden test passed, 1 some failed, 2 the hidden tests did not complete
(killed, exited early, timed out, or a damaged report): an infrastructure failure, never a pass or a
plain fail. Output is deterministic: one line per test and a count, nothing timed, no temporary
paths.

Not covered: the code under test itself runs inside the test process (the tests call it), so
code written to search that process for the nonce and the pipe could forge a report.
"""

import ast
import json
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile

INCOMPLETE = 2
KEEP_MSG = 300
CHILD = r'''
import ctypes, importlib.util, json, os, sys
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: commands the tests start cannot read us
report_fd = int(sys.argv[2])
os.set_inheritable(report_fd, False)
order = json.loads(sys.stdin.readline())
sys.stdin.close()
sys.path.append(os.getcwd())


def why(exc):
    try:
        text = type(exc).__name__ + ": " + str(exc)
    except BaseException:
        text = type(exc).__name__
    return text.replace(order["mask"], "<workspace>")[:300]


out = []
try:
    spec = importlib.util.spec_from_file_location("hidden_tests", sys.argv[1])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    load_error = None
except BaseException as exc:
    mod, load_error = None, "the hidden tests did not load: " + why(exc)
for name in order["names"]:
    if load_error is not None:
        out.append([name, False, load_error[:300]])
        continue
    try:
        getattr(mod, name)()
        out.append([name, True, ""])
    except BaseException as exc:
        out.append([name, False, why(exc)])
data = json.dumps({"nonce": order["nonce"], "results": out, "done": True}).encode()
while data:
    data = data[os.write(report_fd, data):]
os.close(report_fd)
'''
ENV_KEEP = ("PATH", "LANG", "LC_ALL", "TERM", "TMPDIR")


def test_names(tests_file):
    """The module-level ``test_*`` functions of the hidden tests, sorted (read, not imported)."""
    with open(tests_file, encoding="utf-8") as f:
        tree = ast.parse(f.read(), tests_file)
    return sorted(n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_"))


def _not_dumpable():
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
    except (OSError, AttributeError):
        pass


def _copy_tree(src, dst):
    """Copy folders, regular files and symlinks (as links); skip anything else (a FIFO would block)."""
    os.mkdir(dst)
    for entry in os.scandir(src):
        target = os.path.join(dst, entry.name)
        if entry.is_symlink():
            os.symlink(os.readlink(entry.path), target)
        elif entry.is_dir(follow_symlinks=False):
            _copy_tree(entry.path, target)
        elif stat.S_ISREG(entry.stat(follow_symlinks=False).st_mode):
            shutil.copyfile(entry.path, target)


def _child_env(home):
    env = {k: os.environ[k] for k in ENV_KEEP if k in os.environ}
    env.update(HOME=home, PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1")
    return env


def _read_report(fd):
    os.set_blocking(fd, False)
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def _check_report(raw, nonce, names):
    """The results when the report is complete and authentic, else the reason it is not."""
    try:
        report = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None, "no complete report came back"
    if not isinstance(report, dict) or report.get("nonce") != nonce or report.get("done") is not True:
        return None, "the report does not carry this run's nonce"
    results = report.get("results")
    if (not isinstance(results, list) or [r[0] if isinstance(r, list) and r else None for r in results] != names
            or not all(len(r) == 3 and isinstance(r[1], bool) and isinstance(r[2], str) for r in results)):
        return None, "the report does not name every hidden test once"
    return results, None


def _run_child(root, tests_file, names, timeout, scratch, mask):
    """Start the child in ``root``; return (exit status or None on timeout, raw report, nonce, output tail)."""
    nonce = secrets.token_hex(16)
    read_end, write_end = os.pipe()
    log_path = os.path.join(scratch, "child.log")
    home = os.path.join(scratch, "home")
    os.mkdir(home)
    cmd = [sys.executable, "-s", "-S", "-P", "-B", "-c", CHILD, tests_file, str(write_end)]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=root, env=_child_env(home), stdin=subprocess.PIPE, stdout=log,
                                stderr=subprocess.STDOUT, pass_fds=(write_end,), start_new_session=True)
    os.close(write_end)
    try:
        proc.stdin.write((json.dumps({"nonce": nonce, "names": names, "mask": mask}) + "\n").encode())
        proc.stdin.close()
    except OSError:
        pass
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        rc = None
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait()
    raw = _read_report(read_end)
    with open(log_path, "rb") as f:
        tail = f.read()[-2000:].decode("utf-8", errors="replace")
    return rc, raw, nonce, tail


def run_hidden_tests(workspace, tests_file, timeout=60, subdir=""):
    """Run every ``test_*`` function of ``tests_file`` against a copy of ``workspace`` (the tests
    see ``subdir`` of it as cwd and import root). Exit code 0 pass, 1 fail, 2 incomplete."""
    _not_dumpable()
    names = test_names(tests_file)
    scratch = tempfile.mkdtemp(prefix="frank-hidden-")
    try:
        copy = os.path.join(scratch, "workspace")
        _copy_tree(workspace, copy)
        root = os.path.join(copy, subdir) if subdir else copy
        if not os.path.isdir(root):
            for name in names:
                print(f"FAIL {name}: the workspace has no folder {subdir}")
            print(f"0/{len(names)} hidden tests passed")
            return 1
        rc, raw, nonce, tail = _run_child(root, tests_file, names, timeout, scratch, copy)
        results, why = _check_report(raw, nonce, names)
        if rc is None:
            why = f"they did not finish within {timeout} s"
        elif results is not None and rc != 0:
            why = f"the test process exited {rc} after reporting"
        if why is not None:
            print(f"ERROR: the hidden tests did not complete: {why} (exit {rc})")
            print("\n".join(tail.replace(scratch, "<scratch>").strip().splitlines()[-8:]))
            return INCOMPLETE
        failed = [r for r in results if not r[1]]
        for name, ok, msg in results:
            print(("ok   " if ok else "FAIL ") + name + ("" if ok else ": " + msg))
        print(f"{len(results) - len(failed)}/{len(results)} hidden tests passed")
        return 0 if results and not failed else 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
