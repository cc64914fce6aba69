"""Episodes and draws. A *draw* runs every task of the suite once against one engine; each run of a
task is an *episode*: a fresh workspace, the agent loop in the sandbox, then the grader.

Every episode ends with an :class:`EpisodeResult` (failures included), whose fields are the columns
of the store's ``episodes`` table (:meth:`EpisodeResult.row`).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from frankenstein.agent.grade import ERROR, Verdict, grade
from frankenstein.agent.loop import ENGINE_ERROR, FORMAT_ERROR, GRADER_ERROR, AgentLoop, ChatClient
from frankenstein.agent.sandbox import Isolation, Sandbox, detect_isolation
from frankenstein.agent.tasks import Limits, Task, load_suite, make_workspace
from frankenstein.errors import ConfigError


class EpisodeResult(BaseModel):
    """One graded episode; ``status`` is the loop's stop status, or ``grader_error``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_id: str
    draw: int
    task_hash: str
    status: str
    passed: bool
    grader_rc: int | None
    turns: int
    detail: dict[str, Any]

    def row(self) -> dict[str, Any]:
        """The dict ``Store.insert_start(episodes=[...])`` takes."""
        return self.model_dump(mode="json")


@dataclass(frozen=True)
class DrawOutcome:
    """A draw in four counts: its episodes, how many passed, how many the engine failed, how many ended in
    another error (the model's format, the grader)."""

    episodes: int
    passed: int
    engine_errors: int
    episode_errors: int


def draw_outcome(results: Sequence[EpisodeResult]) -> DrawOutcome:
    return DrawOutcome(
        episodes=len(results),
        passed=sum(1 for r in results if r.passed),
        engine_errors=sum(1 for r in results if r.status == ENGINE_ERROR),
        episode_errors=sum(1 for r in results if r.status in (FORMAT_ERROR, GRADER_ERROR)),
    )


def session_id(task_id: str, draw: int) -> str:
    return f"{task_id}-d{draw}"


def _hidden(task: Task, work_dir: Path, trace_path: Path) -> list[Path]:
    """What the agent must not see: the suite (graders, oracles), earlier episodes' folders and the
    trace's folder (earlier conversations). The sandbox drops any that would hide its own Python."""
    return [task.dir.parent, work_dir, Path(trace_path).resolve().parent]


def run_episode(
    client: ChatClient,
    task: Task,
    draw: int,
    trace_path: Path,
    work_dir: Path,
    *,
    model: str,
    temperature: float = 0.0,
    seed: int | None = None,
    limit_overrides: dict[str, Any] | None = None,
    isolation: Isolation | None = None,
) -> EpisodeResult:
    episode_dir = work_dir / session_id(task.id, draw)
    if episode_dir.exists():
        shutil.rmtree(episode_dir)
    episode_dir.mkdir(parents=True)
    workspace = make_workspace(task, episode_dir / "workspace")
    limits = effective_limits(task, limit_overrides)
    with Sandbox(workspace, task.config.sandbox, hide=_hidden(task, work_dir, trace_path), isolation=isolation) as box:
        loop = AgentLoop(
            client, box, limits, trace_path, session_id(task.id, draw), model=model, temperature=temperature, seed=seed
        )
        run = loop.run(task.prompt)
        verdict = grade(task, box, episode_dir)
    return _result(task, draw, run.status, run.turns, run.detail, verdict, box, limits.model_dump())


def effective_limits(task: Task, overrides: dict[str, Any] | None) -> Limits:
    """The task's limits with the caller's overrides (validated like task.toml's)."""
    try:
        return Limits.model_validate({**task.config.limits.model_dump(), **(overrides or {})})
    except ValidationError as exc:
        err = exc.errors()[0]
        msg = {"extra_forbidden": "unknown limit"}.get(err["type"], err["msg"])
        raise ConfigError(msg, path="limit overrides", field=".".join(str(p) for p in err["loc"])) from exc


def _result(
    task: Task,
    draw: int,
    status: str,
    turns: int,
    detail: dict[str, Any],
    verdict: Verdict,
    box: Sandbox,
    limits: dict[str, Any],
) -> EpisodeResult:
    detail = {
        **detail,
        "stop": status,
        "grader": verdict.as_dict(),
        "sandbox": box.record(),
        "limits": limits,
        "task_version": task.config.version,
    }
    final = GRADER_ERROR if verdict.verdict == ERROR else status
    return EpisodeResult(
        task_id=task.id,
        draw=draw,
        task_hash=task.hash,
        status=final,
        passed=verdict.passed,
        grader_rc=verdict.rc,
        turns=turns,
        detail=detail,
    )


def run_draw(
    base_url: str,
    suite_dir: Path,
    tasks: list[Task] | None,
    draw: int,
    trace_path: Path,
    work_dir: Path,
    model: str = "tiny",
    *,
    temperature: float = 0.0,
    seed: int | None = None,
    limit_overrides: dict[str, Any] | None = None,
    isolation: Isolation | None = None,
    api_key: str | None = None,
) -> list[EpisodeResult]:
    """Run every task once (sorted by id), one request at a time, appending each turn to
    ``trace_path`` (use one trace file per start: session ids are ``<task>-d<draw>``).

    ``seed`` defaults to ``draw``. ``limit_overrides`` replaces task limits (e.g. ``{"turns": 2}``).
    """
    tasks = tasks if tasks is not None else load_suite(suite_dir)
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    iso = isolation or detect_isolation()
    with ChatClient(base_url, api_key=api_key) as client:
        return [
            run_episode(
                client,
                t,
                draw,
                Path(trace_path),
                work_dir,
                model=model,
                temperature=temperature,
                seed=draw if seed is None else seed,
                limit_overrides=limit_overrides,
                isolation=iso,
            )
            for t in sorted(tasks, key=lambda t: t.id)
        ]
