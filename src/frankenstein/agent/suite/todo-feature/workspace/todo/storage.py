"""The JSON file: {"tasks": [...]}. Written to a temporary file and renamed, so it is never half-written."""

import json
import os
from pathlib import Path

from todo.models import Task


def data_file():
    return Path(os.environ.get("TODO_FILE", "todo.json"))


class Store:
    def __init__(self, path=None):
        self.path = Path(path) if path else data_file()
        self.tasks = []
        if self.path.exists():
            data = json.loads(self.path.read_text(encoding="utf-8"))
            self.tasks = [Task.from_json(t) for t in data.get("tasks", [])]

    def next_id(self):
        return len(self.tasks) + 1

    def get(self, task_id):
        for task in self.tasks:
            if task.id == task_id:
                return task
        raise KeyError(task_id)

    def add(self, task):
        self.tasks.append(task)

    def save(self):
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps({"tasks": [t.to_json() for t in self.tasks]}, indent=2), encoding="utf-8")
        os.replace(tmp, self.path)
