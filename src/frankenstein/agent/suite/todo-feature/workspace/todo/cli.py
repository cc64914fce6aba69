"""Command line: add, list, done."""

import argparse
import sys

from todo.models import Task, check_priority
from todo.render import lines
from todo.storage import Store


def build_parser():
    p = argparse.ArgumentParser(prog="todo")
    sub = p.add_subparsers(dest="command", required=True)
    add = sub.add_parser("add")
    add.add_argument("title")
    add.add_argument("--priority", default="normal")
    add.add_argument("--tag", action="append", default=[])
    ls = sub.add_parser("list")
    ls.add_argument("--tag")
    done = sub.add_parser("done")
    done.add_argument("id", type=int)
    return p


def cmd_add(store, args):
    task = Task(id=store.next_id(), title=args.title, priority=check_priority(args.priority), tags=args.tag)
    store.add(task)
    store.save()
    return [f"added {task.id}: {task.title}"]


def cmd_list(store, args):
    tasks = sorted(store.tasks, key=lambda t: t.id)
    if args.tag:
        tasks = [t for t in tasks if args.tag in t.tags]
    return lines(tasks)


def cmd_done(store, args):
    task = store.get(args.id)
    task.done = True
    store.save()
    return [f"done {task.id}: {task.title}"]


COMMANDS = {"add": cmd_add, "list": cmd_list, "done": cmd_done}


def main(argv):
    args = build_parser().parse_args(argv)
    store = Store()
    try:
        out = COMMANDS[args.command](store, args)
    except KeyError as exc:
        print(f"error: no task {exc.args[0]}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print("\n".join(out))
    return 0
