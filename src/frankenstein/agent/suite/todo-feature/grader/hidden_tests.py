"""Hidden tests for todo-feature: each test runs `python -m todo` against a fresh TODO_FILE."""

import json
import os
import subprocess
import sys
import tempfile


class Result:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


class Todo:
    """Calls ``todo.cli.main`` in this process (fast); one test below also runs ``python -m todo``."""

    def __init__(self):
        self.dir = tempfile.mkdtemp()
        self.file = os.path.join(self.dir, "todo.json")

    def __call__(self, *args, ok=True):
        import io
        from contextlib import redirect_stderr, redirect_stdout
        from todo.cli import main
        os.environ["TODO_FILE"] = self.file
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            try:
                rc = main(list(args))
            except SystemExit as exc:
                rc = exc.code if isinstance(exc.code, int) else 1
        done = Result(rc, out.getvalue(), err.getvalue())
        if ok:
            assert done.returncode == 0, (args, done.returncode, done.stderr[-300:])
        return done


def _out(done):
    return done.stdout.strip()


def test_old_commands_still_work():
    t = Todo()
    assert _out(t("add", "a", "--priority", "high", "--tag", "x")) == "added 1: a"
    assert _out(t("add", "b")) == "added 2: b"
    assert _out(t("done", "1")) == "done 1: a"
    assert _out(t("list")) == "[x] 1 (high) a #x\n[ ] 2 b"
    assert _out(t("list", "--tag", "x")) == "[x] 1 (high) a #x"


def test_remove():
    t = Todo()
    t("add", "a")
    t("add", "b")
    assert _out(t("remove", "1")) == "removed 1: a"
    assert _out(t("list")) == "[ ] 2 b"


def test_remove_unknown():
    t = Todo()
    t("add", "a")
    done = t("remove", "7", ok=False)
    assert done.returncode == 1
    assert done.stderr.strip() == "error: no task 7"
    assert _out(t("list")) == "[ ] 1 a"


def test_ids_not_reused_after_removing_last():
    t = Todo()
    t("add", "a")
    t("add", "b")
    t("remove", "2")
    assert _out(t("add", "c")) == "added 3: c"


def test_ids_not_reused_after_removing_all():
    t = Todo()
    t("add", "a")
    t("add", "b")
    t("remove", "1")
    t("remove", "2")
    assert _out(t("add", "c")) == "added 3: c"
    assert _out(t("list")) == "[ ] 3 c"


def test_old_file_without_record():
    t = Todo()
    with open(t.file, "w") as f:
        json.dump({"tasks": [{"id": 4, "title": "old", "done": False, "priority": "normal", "tags": []},
                             {"id": 9, "title": "older", "done": True, "priority": "low", "tags": []}]}, f)
    assert _out(t("add", "new")) == "added 10: new"
    assert _out(t("list")) == "[ ] 4 old\n[x] 9 (low) older\n[ ] 10 new"


def test_pending():
    t = Todo()
    t("add", "a")
    t("add", "b")
    t("add", "c")
    t("done", "2")
    assert _out(t("list", "--pending")) == "[ ] 1 a\n[ ] 3 c"


def test_sort_priority():
    t = Todo()
    t("add", "a", "--priority", "low")
    t("add", "b")
    t("add", "c", "--priority", "high")
    t("add", "d", "--priority", "high")
    assert _out(t("list", "--sort", "priority")) == "[ ] 3 (high) c\n[ ] 4 (high) d\n[ ] 2 b\n[ ] 1 (low) a"
    assert _out(t("list", "--sort", "id")) == "[ ] 1 (low) a\n[ ] 2 b\n[ ] 3 (high) c\n[ ] 4 (high) d"


def test_combined_filters():
    t = Todo()
    t("add", "a", "--tag", "w", "--priority", "low")
    t("add", "b", "--tag", "w", "--priority", "high")
    t("add", "c", "--tag", "h", "--priority", "high")
    t("add", "d", "--tag", "w")
    t("done", "4")
    assert _out(t("list", "--pending", "--tag", "w", "--sort", "priority")) == "[ ] 2 (high) b #w\n[ ] 1 (low) a #w"


def test_empty_pending():
    t = Todo()
    t("add", "a")
    t("done", "1")
    assert _out(t("list", "--pending")) == "no tasks"


def test_command_line_end_to_end():
    d = tempfile.mkdtemp()
    env = dict(os.environ, TODO_FILE=os.path.join(d, "todo.json"))

    def run(*args):
        return subprocess.run([sys.executable, "-m", "todo", *args], capture_output=True, text=True, env=env,
                              cwd=os.getcwd(), timeout=30)

    assert run("add", "a").stdout.strip() == "added 1: a"
    assert run("remove", "1").stdout.strip() == "removed 1: a"
    bad = run("remove", "1")
    assert (bad.returncode, bad.stderr.strip()) == (1, "error: no task 1")
    assert run("list", "--pending").stdout.strip() == "no tasks"
