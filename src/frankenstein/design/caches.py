"""Fresh process, warm caches: per-recipe, per-arm cache folders inside the campaign for what engines
compile or download at start, set through the environment of every process a start launches.

Every start is a fresh engine process, on purpose; what it compiles (vLLM's torch.compile cache, the
inductor and Triton kernels, a kernel cache a part names) or downloads need not be. The folders are
keyed by the arm's resolved recipe (a hash of what is launched: :func:`recipe_key`) and the arm,

    <campaign>/caches/<recipe key>/<arm>/warm/                          cache = "warm" (the default): kept, reused
    <campaign>/caches/<recipe key>/<arm>/cold-<design>-b<B>-p<P>-r<R>/   cache = "cold": empty for the start, removed after

so the first start of an arm pays the compile, later starts of that arm reuse it, and a later design
that runs the same recipe as the same arm reuses it too; no arm ever reads the other arm's caches (an
A/A design's two arms launch the same recipe and still get two folders), so arm order stays the only
thing randomization has to balance. ``frank replay`` uses ``<recipe key>/replay/warm``.

The variables set are those of :func:`cache_vars` (each engine adapter's cache variables, its ``cache_vars``
trait, and the libraries' of :data:`LIBRARY_CACHE_VARS`; each into its own sub-folder) plus every variable the
recipe or one of its parts names in ``cache_vars`` (``frank.toml``; sub-folder ``named/<VAR>``): a
named variable is frank's to set, under the design's policy. A :func:`cache_vars` variable the
recipe's ``env`` sets and does not name is left to the recipe (outside the campaign, not emptied under
``cold``); the record says so (``left_to_recipe``) and so does the summary.
``XDG_CACHE_HOME`` moves the default place of everything that caches under ``~/.cache``; the
Hugging Face hub cache is kept where it was (``HF_HOME`` set to it) so models are not downloaded again.

The start's record says what ran (``resources["caches"]``): policy, folder (relative to the
campaign), whether it was empty when the start began, its bytes before and after, the variables set
and those named by the recipe.

    recipe_key(recipe) -> str                   "recipe-<16 hex>" of the launch fields
    folder_for(root, key, arm, policy, slot, design_id) -> Path
    cache_env(folder, recipe) -> (env, left to the recipe)
    applied(campaign, reg, slot)      context: the folder made, the env set for launches, the record attached
    folder_applied(campaign, recipe, arm, policy, cold_name)   the same, for any start (frank replay)
    around_slot(campaign, reg, slot)  what the runner wraps each slot in: caches, then the prefetch
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from frankenstein.campaign import Campaign
from frankenstein.config import LAUNCH_FIELDS, ResolvedRecipe
from frankenstein.design import phases, prefetch
from frankenstein.design.model import Registered, Slot
from frankenstein.engines import cache_vars as engine_cache_vars
from frankenstein.engines import traits_of
from frankenstein.engines.process import launch_env

LIBRARY_CACHE_VARS = {
    "TORCHINDUCTOR_CACHE_DIR": "torchinductor",
    "TRITON_CACHE_DIR": "triton",
    "XDG_CACHE_HOME": "xdg",
}


def cache_vars() -> dict[str, str]:
    """{variable: sub-folder} set for every launch: each adapter's cache variables and the libraries'."""
    return {**engine_cache_vars(), **LIBRARY_CACHE_VARS}


POLICIES = ("warm", "cold")


NAMED = "named"
"""The sub-folder of the variables a recipe or part names in ``cache_vars``."""


def recipe_key(recipe: ResolvedRecipe | None, command: list[str] | None = None) -> str:
    """``recipe-<16 hex>``: the sha256 of what a start launches (:data:`LAUNCH_FIELDS`; a command arm's
    command), so the same recipe gets the same folders in every design, and a changed one new ones."""
    content: dict[str, Any] = (
        {k: getattr(recipe, k) for k in LAUNCH_FIELDS} if recipe is not None else {"command": command}
    )
    text = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return "recipe-" + hashlib.sha256(text.encode()).hexdigest()[:16]


def folder_for(root: Path, key: str, arm: str, policy: str, slot: Slot | None = None, design_id: str = "") -> Path:
    base = root / "caches" / key / arm
    if policy == "cold":
        where = f"b{slot.block + 1}-p{slot.position}-r{slot.rep}" if slot is not None else "start"
        return base / f"cold-{design_id}-{where}" if design_id else base / f"cold-{where}"
    return base / "warm"


def sub_folders(named: list[str]) -> dict[str, str]:
    """{variable: sub-folder}: :func:`cache_vars` and the named ones."""
    return {**cache_vars(), **{var: f"{NAMED}/{var}" for var in named}}


def cache_env(folder: Path, recipe: ResolvedRecipe | None) -> tuple[dict[str, str], list[str]]:
    """The variables to set for a launch, and the :func:`cache_vars` ones left to the recipe's own ``env``
    (set there and not named in ``cache_vars``). A named variable is always set (``resolve`` drops any
    value ``env`` gave it)."""
    recipe_env = recipe.env if recipe is not None else {}
    named = list(recipe.cache_vars) if recipe is not None else []
    env = {var: str(folder / sub) for var, sub in sub_folders(named).items() if var in named or var not in recipe_env}
    if "XDG_CACHE_HOME" in env and "HF_HOME" not in recipe_env:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        env["HF_HOME"] = os.environ.get("HF_HOME") or str(Path(xdg) / "huggingface")
    return env, sorted(var for var in cache_vars() if var in recipe_env and var not in named)


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
    """The slot's cache folders (:func:`folder_applied`) under the design's policy."""
    spec = reg.design.arms[slot.arm]
    recipe = reg.frozen.recipes.get(slot.arm)
    key = recipe_key(recipe, spec.command)
    with folder_applied(campaign, recipe, slot.arm, reg.design.cache, key, slot, reg.design_id) as record:
        record["arm_kind"] = "command" if spec.command is not None else "recipe"
        yield record


@contextmanager
def folder_applied(
    campaign: Campaign,
    recipe: ResolvedRecipe | None,
    arm: str,
    policy: str = "warm",
    key: str | None = None,
    slot: Slot | None = None,
    design_id: str = "",
) -> Iterator[dict[str, Any]]:
    """Make the start's cache folders (empty ones for ``cold``), set the launch environment, attach
    the record to the current start's phase recorder; a cold folder is removed after the start."""
    if recipe is not None and not traits_of(recipe.engine).launched:  # a server frank did not start: nothing to give
        record_na: dict[str, Any] = {"policy": "not applicable", "why": "a server frank did not start"}
        rec_na = phases.current()
        if rec_na is not None:
            rec_na.attach("caches", lambda: record_na)
        yield record_na
        return
    key = key or recipe_key(recipe)
    folder = folder_for(campaign.root, key, arm, policy, slot, design_id)
    named = list(recipe.cache_vars) if recipe is not None else []
    with phases.phase("caches"):
        if policy == "cold" and folder.exists():
            shutil.rmtree(folder)
        for sub in sub_folders(named).values():
            (folder / sub).mkdir(parents=True, exist_ok=True)
        files, size = size_of(folder)
    env, left = cache_env(folder, recipe)
    record: dict[str, Any] = {
        "policy": policy,
        "key": key,
        "folder": str(folder.relative_to(campaign.root)),
        "empty_at_start": files == 0,
        "files_at_start": files,
        "bytes_at_start": size,
        "vars": sorted(env),
        "named": named,
        "left_to_recipe": left,
        "arm_kind": "recipe",
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
