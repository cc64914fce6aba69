import io
import os
import tempfile
import unittest
from contextlib import redirect_stdout

from todo.cli import main


def run(*argv):
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main(list(argv))
    return rc, buf.getvalue().strip()


class CliTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        os.environ["TODO_FILE"] = os.path.join(self.dir.name, "todo.json")

    def tearDown(self):
        self.dir.cleanup()

    def test_add_list_done(self):
        self.assertEqual(run("add", "buy milk", "--priority", "high", "--tag", "home"), (0, "added 1: buy milk"))
        self.assertEqual(run("add", "write report"), (0, "added 2: write report"))
        self.assertEqual(run("done", "2"), (0, "done 2: write report"))
        self.assertEqual(run("list"), (0, "[ ] 1 (high) buy milk #home\n[x] 2 write report"))

    def test_empty(self):
        self.assertEqual(run("list"), (0, "no tasks"))


if __name__ == "__main__":
    unittest.main()
