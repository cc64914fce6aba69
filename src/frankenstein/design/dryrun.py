"""``frank run --dry-run`` and ``frank engine command``: what each arm would launch, without starting
anything. A design file is checked exactly as registration checks it (nothing is registered); a
registered design shows its frozen recipes."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from frankenstein.campaign import Campaign
from frankenstein.config import ResolvedRecipe
from frankenstein.design.model import FrozenDesign, load_design
from frankenstein.design.registry import check_design, get
from frankenstein.engines import launch_command


@dataclass(frozen=True)
class ArmLaunch:
    """One arm's launch: its recipe name (or ``command arm``), the argv and the environment it adds."""

    arm: str
    recipe: str
    argv: list[str]
    env: dict[str, str]


def recipe_launch(arm: str, recipe: ResolvedRecipe, log_dir: Path) -> ArmLaunch:
    return ArmLaunch(arm, recipe.name, launch_command(recipe, log_dir), dict(recipe.env))


def design_launches(campaign: Campaign, design: str) -> tuple[str, list[ArmLaunch]]:
    """(what was read, each arm's launch) for a design file (checked, not registered) or a registered id."""
    path = Path(design)
    if path.is_file():
        frozen = check_design(campaign, load_design(path), path)
        source = f"{path} (checked as registration would; not registered)"
    else:
        frozen = get(campaign, design).frozen
        source = f"{design} (registered)"
    return source, arm_launches(frozen, campaign.logs)


def arm_launches(frozen: FrozenDesign, log_dir: Path) -> list[ArmLaunch]:
    out = []
    for arm, recipe in frozen.recipes.items():
        if recipe is None:
            out.append(ArmLaunch(arm, "command arm", list(frozen.design.arms[arm].command or []), {}))
        else:
            out.append(recipe_launch(arm, recipe, log_dir))
    return out


def launch_lines(launch: ArmLaunch) -> list[str]:
    """Lines for the terminal: the arm, then the shell-quoted command line and any environment it sets."""
    head = f"{launch.arm} ({launch.recipe}):"
    if not launch.argv:
        return [head, "  (a server frank does not start)"]
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(launch.env.items()))
    return [head, f"  {env + ' ' if env else ''}{shlex.join(launch.argv)}"]
