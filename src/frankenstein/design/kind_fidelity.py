"""Moved to :mod:`frankenstein.design.kinds.fidelity`. Kept only because fidelity/check.py and two of its
tests (another room) import ``run_forced`` from here; delete once they import the new module."""

from __future__ import annotations

from frankenstein.design.kinds.fidelity import run_forced

__all__ = ["run_forced"]
