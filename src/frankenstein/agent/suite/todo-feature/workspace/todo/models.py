"""The task record and its JSON form."""

from dataclasses import asdict, dataclass, field

PRIORITIES = ("low", "normal", "high")


@dataclass
class Task:
    id: int
    title: str
    done: bool = False
    priority: str = "normal"
    tags: list = field(default_factory=list)

    def to_json(self):
        return asdict(self)

    @classmethod
    def from_json(cls, data):
        return cls(id=int(data["id"]), title=str(data["title"]), done=bool(data.get("done", False)),
                   priority=data.get("priority", "normal"), tags=list(data.get("tags", [])))


def check_priority(value):
    if value not in PRIORITIES:
        raise ValueError(f"bad priority {value!r} (use {', '.join(PRIORITIES)})")
    return value
