"""Fresh process, warm caches: per-arm cache folders inside the campaign for what engines compile or
download at start, set through the environment of every process a start launches.

Every start is a fresh engine process, on purpose; what it compiles (vLLM's torch.compile cache, the
inductor and Triton kernels) or downloads need not be. Each arm of a design has its own folder,

    <campaign>/caches/<design id>/<arm>/warm/            cache = "warm" (the default): kept, reused
    <campaign>/caches/<design id>/<arm>/cold-b<B>-p<P>-r<R>/   cache = "cold": made empty for the start, removed after

so the first start of an arm pays the compile and later starts of that arm reuse it, and no arm ever
reads the other arm's caches (arm order stays the only thing randomization has to balance). The
variables set (:data:`CACHE_VARS`) point into that folder; a variable the recipe's own ``env`` sets
is left to the recipe (a part that names a cache folder keeps it), and is recorded as such.
``XDG_CACHE_HOME`` moves the default place of everything that caches under ``~/.cache``; the
Hugging Face hub cache is kept where it was (``HF_HOME`` set to it) so models are not downloaded again.

The start's record says what ran (``resources["caches"]``): policy, folder (relative to the
campaign), whether it was empty when the start began, its bytes before and after.

    folder_for(root, design_id, arm, policy, slot) -> Path
    cache_env(folder, recipe_env) -> (env, left to the recipe)
    applied(campaign, reg, slot)      context: the folder made, the env set for launches, the record attached
    around_slot(campaign, reg, slot)  what the runner wraps each slot in: caches, then the prefetch
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from frankenstein.campaign import Campaign
from frankenstein.design import phases, prefetch
from frankenstein.design.model import Registered, Slot
from frankenstein.engines.process import launch_env

CACHE_VARS = {
    "VLLM_CACHE_ROOT": "vllm",
    "TORCHINDUCTOR_CACHE_DIR": "torchinductor",
    "TRITON_CACHE_DIR": "triton",
    "XDG_CACHE_HOME": "xdg",
    "LLAMA_CACHE": "llama",
}
POLICIES = ("warm", "cold")


def folder_for(root: Path, design_id: str, arm: str, policy: str, slot: Slot) -> Path:
    base = root / "caches" / design_id / arm
    if policy == "cold":
        return base / f"cold-b{slot.block + 1}-p{slot.position}-r{slot.rep}"
    return base / "warm"


def cache_env(folder: Path, recipe_env: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The variables to set for a launch, and those left to the recipe's own ``env``."""
    env = {var: str(folder / sub) for var, sub in CACHE_VARS.items() if var not in recipe_env}
    if "XDG_CACHE_HOME" in env and "HF_HOME" not in recipe_env:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        env["HF_HOME"] = os.environ.get("HF_HOME") or str(Path(xdg) / "huggingface")
    return env, sorted(var for var in CACHE_VARS if var in recipe_env)


def size_of(folder: Path) -> tuple[int, int]:
    """(files, bytes) under ``folder``."""
    files = size = 0
    for dirpath, _, names in os.walk(folder):
        for name in names:
            try:
                size += os.lstat(os.path.join(dirpath, name)).st_size
                files += 1
            except OSError:
                pass
    return files, size


@contextmanager
def applied(campaign: Campaign, reg: Registered, slot: Slot) -> Iterator[dict[str, Any]]:
    """Make the slot's cache folder (an empty one for ``cold``), set the launch environment, attach
    the record to the start; a cold folder is removed after the start."""
    policy = reg.design.cache
    spec = reg.design.arms[slot.arm]
    recipe = reg.frozen.recipes.get(slot.arm)
    folder = folder_for(campaign.root, reg.design_id, slot.arm, policy, slot)
    with phases.phase("caches"):
        if policy == "cold" and folder.exists():
            shutil.rmtree(folder)
        for sub in CACHE_VARS.values():
            (folder / sub).mkdir(parents=True, exist_ok=True)
        files, size = size_of(folder)
    env, left = cache_env(folder, recipe.env if recipe is not None else {})
    record: dict[str, Any] = {
        "policy": policy,
        "folder": str(folder.relative_to(campaign.root)),
        "empty_at_start": files == 0,
        "files_at_start": files,
        "bytes_at_start": size,
        "vars": sorted(env),
        "left_to_recipe": left,
        "arm_kind": "command" if spec.command is not None else "recipe",
    }

    def final() -> dict[str, Any]:
        files_end, size_end = size_of(folder)
        record.update(files_at_end=files_end, bytes_at_end=size_end)
        return record

    rec = phases.current()
    if rec is not None:
        rec.attach("caches", final)
    try:
        with launch_env(env):
            yield record
    finally:
        if policy == "cold":
            shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def around_slot(campaign: Campaign, reg: Registered, slot: Slot) -> Iterator[None]:
    """What the runner wraps each slot's ``watched(...)`` in: the start's phase recorder, its cache
    folders (:func:`applied`) and the prefetch of the next start's files (:func:`prefetch.ahead`)."""
    with phases.recording(), applied(campaign, reg, slot), prefetch.ahead(campaign, reg, slot):
        yield
