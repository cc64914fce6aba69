"""Ray is an optional extra: ``--ray`` without it is one line saying how to install it."""

from __future__ import annotations

import importlib.util

from frankenstein.config import CampaignConfig
from frankenstein.errors import ClusterError

INSTALL = "pip install 'frankenstein[ray]'"


def need_ray() -> None:
    """Raise :class:`ClusterError` (one line, how to install) when Ray cannot be imported."""
    try:
        found = importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ClusterError(f"frank run --ray needs Ray, which is not installed here: {INSTALL}")


def ray_address(option: str | None, config: CampaignConfig) -> str | None:
    """The cluster to run on: ``--ray`` wins over ``[cluster] ray`` in frank.toml; None runs locally."""
    return option or config.cluster.ray
