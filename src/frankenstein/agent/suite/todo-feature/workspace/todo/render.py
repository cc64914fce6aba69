"""One line per task."""


def line(task):
    box = "[x]" if task.done else "[ ]"
    prio = "" if task.priority == "normal" else f" ({task.priority})"
    tags = "".join(f" #{t}" for t in task.tags)
    return f"{box} {task.id}{prio} {task.title}{tags}"


def lines(tasks):
    return [line(t) for t in tasks] or ["no tasks"]
