"""Frankenstein: let an engine part in only through a registered, randomized, exact test."""

from __future__ import annotations

__version__ = "0.1.0"
