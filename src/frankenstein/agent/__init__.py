"""Agent-task benchmark: task folders (``tasks``), the sandbox (``sandbox``, ``jail``), the chat loop
with tools (``loop``), grading (``grade``), episodes and draws (``draw``), suite validation
(``validate``) and the shipped suite (``suite/``).

The lead's entry point is :func:`frankenstein.agent.draw.run_draw`; it is re-exported here.
"""

from __future__ import annotations

from frankenstein.agent.draw import EpisodeResult, run_draw, run_episode
from frankenstein.agent.tasks import Task, load_suite, load_task, shipped_suite

__all__ = ["EpisodeResult", "Task", "load_suite", "load_task", "run_draw", "run_episode", "shipped_suite"]
