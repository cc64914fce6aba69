"""Agent task folders: ``task.toml``, ``prompt.md``, ``workspace/``, ``grader/``, ``oracle/``.

A task is data on disk. Its identity is the hash of the whole folder (:func:`task_hash`), stored with
every episode, so a result always names the exact task it was graded under. A task's workspace is
copied fresh for every episode (:func:`make_workspace`); a large input can be generated there at copy
time by the task's ``setup`` script from a fixed seed, which keeps the folder small on disk.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from pydantic import Field, ValidationError

from frankenstein.errors import TaskError
from frankenstein.validation import FrozenUserFile

REQUIRED = ("task.toml", "prompt.md", "workspace", "grader", "oracle")
GRADER_SCRIPT = "grade.py"
SKIP_NAMES = {"__pycache__", ".pytest_cache"}
MAX_TASK_BYTES = 200_000


class _Strict(FrozenUserFile):
    """A task file's fields (user-written)."""


class Limits(_Strict):
    """What one episode may spend. ``output_tokens`` caps each response (``max_tokens``)."""

    turns: int = Field(default=30, ge=1)
    output_tokens: int = Field(default=2048, ge=1)
    context_tokens: int = Field(default=32768, ge=256)
    wall_time_s: float = Field(default=900.0, gt=0)
    command_timeout_s: float = Field(default=60.0, gt=0)
    format_errors: int = Field(default=3, ge=1)


class SandboxLimits(_Strict):
    """Per-process limits of every command the agent (or the grader) runs."""

    cpu_s: int = Field(default=120, ge=1)
    memory_mb: int = Field(default=4096, ge=64)
    file_size_mb: int = Field(default=64, ge=1)
    processes: int = Field(default=128, ge=4)
    open_files: int = Field(default=256, ge=16)
    tmp_mb: int = Field(default=256, ge=1)
    workspace_mb: int = Field(
        default=256,
        ge=1,
        description="MB the workspace may hold: a tmpfs of this size where the sandbox has namespaces (a write past "
        "it fails: no space left), else a total checked after each tool call (past it the episode ends: workspace_limit)",
    )
    output_chars: int = Field(default=12000, ge=200)
    max_output_bytes: int = Field(default=8_000_000, ge=1000)


class GraderSettings(_Strict):
    timeout_s: float = Field(default=120.0, gt=0)


class TaskConfig(_Strict):
    """The contents of ``task.toml``."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    version: int = Field(ge=1)
    description: str = ""
    setup: str | None = None
    seed: int = 0
    limits: Limits = Limits()
    sandbox: SandboxLimits = SandboxLimits()
    grader: GraderSettings = GraderSettings()


class Task(_Strict):
    """A loaded task: its folder, its configuration, its prompt and its hash."""

    dir: Path
    config: TaskConfig
    prompt: str
    hash: str

    @property
    def id(self) -> str:
        return self.config.id


def task_hash(folder: Path) -> str:
    """sha256 over every file's relative path, executable bit and bytes, in sorted path order."""
    h = hashlib.sha256()
    for path in _files(folder):
        rel = path.relative_to(folder).as_posix()
        h.update(rel.encode() + b"\0" + (b"x" if path.stat().st_mode & 0o111 else b"-") + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in _files(folder))


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and not (SKIP_NAMES & set(p.parts)))


def load_task(folder: str | Path) -> Task:
    """Read and check one task folder; :class:`TaskError` names the file and the field."""
    folder = Path(folder).resolve()
    if not folder.is_dir():
        raise TaskError("not a folder", path=folder)
    for name in REQUIRED:
        if not (folder / name).exists():
            raise TaskError(f"missing {name}", path=folder)
    config = _read_config(folder / "task.toml")
    if config.id != folder.name:
        raise TaskError(
            f"id {config.id!r} differs from the folder name {folder.name!r}", path=folder / "task.toml", field="id"
        )
    if not (folder / "grader" / GRADER_SCRIPT).is_file():
        raise TaskError(f"missing grader/{GRADER_SCRIPT}", path=folder)
    if config.setup is not None and not _inside(folder, folder / config.setup):
        raise TaskError("must name a file inside the task folder", path=folder / "task.toml", field="setup")
    prompt = (folder / "prompt.md").read_text(encoding="utf-8")
    if not prompt.strip():
        raise TaskError("is empty", path=folder / "prompt.md")
    return Task(dir=folder, config=config, prompt=prompt, hash=task_hash(folder))


def _inside(folder: Path, path: Path) -> bool:
    return path.resolve().is_relative_to(folder) and path.resolve().is_file()


def _read_config(path: Path) -> TaskConfig:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise TaskError(f"not valid TOML ({exc})", path=path) from exc
    try:
        return TaskConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = {"extra_forbidden": "unknown field", "missing": "missing"}.get(err["type"], err["msg"])
        raise TaskError(msg, path=path, field=field) from exc


def load_suite(folder: str | Path, ids: list[str] | None = None) -> list[Task]:
    """Every task folder (one holding ``task.toml``) directly under ``folder``, sorted by id."""
    folder = Path(folder)
    if not folder.is_dir():
        raise TaskError("not a folder", path=folder)
    tasks = [load_task(p) for p in sorted(folder.iterdir()) if (p / "task.toml").is_file()]
    if not tasks:
        raise TaskError("no task folders (folders holding task.toml)", path=folder)
    if ids is not None:
        known = {t.id for t in tasks}
        missing = [i for i in ids if i not in known]
        if missing:
            raise TaskError(f"unknown task id(s): {', '.join(missing)}", path=folder)
        tasks = [t for t in tasks if t.id in ids]
    return tasks


def shipped_suite() -> Path:
    """The suite shipped inside the package."""
    return Path(__file__).with_name("suite")


def make_workspace(task: Task, dest: Path, *, oracle: bool = False) -> Path:
    """Copy ``workspace/`` to ``dest`` (which must not exist), run the setup script, and overlay
    ``oracle/`` when asked (validation only)."""
    shutil.copytree(task.dir / "workspace", dest, ignore=shutil.ignore_patterns(*SKIP_NAMES))
    if task.config.setup is not None:
        _run_setup(task, dest)
    if oracle:
        shutil.copytree(task.dir / "oracle", dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns(*SKIP_NAMES))
    return dest


def _run_setup(task: Task, dest: Path) -> None:
    """The setup script is ours, not the agent's: it runs outside the sandbox, before the episode."""
    script = task.dir / str(task.config.setup)
    cmd = [sys.executable, str(script), str(dest), str(task.config.seed)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=script.parent)
    except subprocess.TimeoutExpired as exc:
        raise TaskError("setup script timed out after 120 s", path=script) from exc
    if done.returncode != 0:
        raise TaskError(f"setup script failed (exit {done.returncode}): {done.stderr.strip()[-500:]}", path=script)
