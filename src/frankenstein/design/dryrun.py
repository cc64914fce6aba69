"""``frank run --dry-run`` and ``frank engine command``: what each arm would launch, without starting
anything. A design file is checked exactly as registration checks it (nothing is registered); a
registered design shows its frozen recipes."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from frankenstein.campaign import Campaign
from frankenstein.config import ResolvedRecipe
from frankenstein.design.model import DesignFile, FrozenDesign, load_design
from frankenstein.design.registry import check_design, get
from frankenstein.design.rules import BlockRule
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


def requirement_line(design: DesignFile) -> str | None:
    """What the block rule needs at the registered blocks, in words, said before anything runs; None for a
    rule that is not a block rule (fidelity, memory) and for an unpaired design (its starts are not blocks)."""
    if not isinstance(design.rule, BlockRule) or design.layout == "unpaired":
        return None
    return f"rule {design.rule.kind}: {design.rule.requirement(design.blocks)}"


def design_launches(campaign: Campaign, design: str) -> tuple[str, FrozenDesign, list[ArmLaunch]]:
    """(what was read, the design, each arm's launch) for a design file (checked, not registered) or a
    registered id."""
    path = Path(design)
    if path.is_file():
        frozen = check_design(campaign, load_design(path), path)
        source = f"{path} (checked as registration would; not registered)"
    else:
        frozen = get(campaign, design).frozen
        source = f"{design} (registered)"
    return source, frozen, arm_launches(frozen, campaign.logs)


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
