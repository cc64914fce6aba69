"""The JSON file: {"next_id": N, "tasks": [...]}. Written to a temporary file and renamed, so it is never half-written."""

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
        self._next = None
        if self.path.exists():
            data = json.loads(self.path.read_text(encoding="utf-8"))
            self.tasks = [Task.from_json(t) for t in data.get("tasks", [])]
            self._next = data.get("next_id")

    def next_id(self):
        largest = max((t.id for t in self.tasks), default=0)
        return max(self._next or 0, largest + 1)

    def get(self, task_id):
        for task in self.tasks:
            if task.id == task_id:
                return task
        raise KeyError(task_id)

    def add(self, task):
        self.tasks.append(task)
        self._next = task.id + 1

    def remove(self, task_id):
        task = self.get(task_id)
        self._next = self.next_id()
        self.tasks.remove(task)
        return task

    def save(self):
        tmp = self.path.with_name(self.path.name + ".tmp")
        data = {"next_id": self.next_id(), "tasks": [t.to_json() for t in self.tasks]}
        tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
        os.replace(tmp, self.path)
