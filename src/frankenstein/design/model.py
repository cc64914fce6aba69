"""Design files (TOML, pydantic, ``extra="forbid"``).

A design names its kind, two arms (``served`` and ``candidate``), the blocks, the workload and its
hash, replay settings, the primary metric and its direction, the decision rule and alpha, secondary
metrics (reported, not tested), the stopping rule, the failure policy, gates and a hypothesis.
At registration the arms' recipes are resolved and frozen into the design, so what runs is exactly
what was registered even if ``frank.toml`` changes later.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from frankenstein.config import ResolvedRecipe
from frankenstein.design.rules import AllBlocksBetter, HarmRule, PermutationRule, SignRule
from frankenstein.errors import DesignError
from frankenstein.workload.replay import ReplaySettings

Kind = Literal["speed", "fidelity", "agent", "screen", "aa"]
ARMS = ("served", "candidate")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ArmSpec(Strict):
    """A recipe (by name, ``served`` for the served recipe) plus parts, or a command that prints JSON metrics."""

    recipe: str | None = None
    parts: list[str] = Field(default_factory=list)
    command: list[str] | None = None

    @model_validator(mode="after")
    def _one_of(self) -> ArmSpec:
        if (self.recipe is None) == (self.command is None):
            raise ValueError("an arm needs exactly one of `recipe` or `command`")
        if self.command is not None and self.parts:
            raise ValueError("a command arm takes no parts")
        return self


class FidelityRule(Strict):
    """Mean KL ≤ tolerance and fewer than ``max_positions_above`` positions above ``threshold`` (nats)."""

    kind: Literal["fidelity"] = "fidelity"
    tolerance: float = Field(ge=0, description="mean KL (nats) allowed")
    threshold: float = Field(default=0.5, gt=0, description="KL (nats) above which a position counts")
    max_positions_above: int = Field(default=1, ge=1, description="fewer than this many positions above threshold")


DesignRule = Annotated[
    Union[AllBlocksBetter, SignRule, PermutationRule, HarmRule, FidelityRule], Field(discriminator="kind")
]


class FidelitySpec(Strict):
    top_k: int = Field(default=64, ge=1)
    max_positions: int | None = Field(default=None, ge=1)


class AgentSpec(Strict):
    suite: str = Field(default="pkg:suite", description="task suite folder; pkg:suite is the shipped one")
    tasks: list[str] | None = Field(default=None, description="task ids to run (default: all)")
    draws: int = Field(default=1, ge=1, description="draws per start; one draw runs every task once")
    limits: dict[str, float] = Field(default_factory=dict, description="task limit overrides, e.g. turns = 4")
    temperature: float = 0.0


class Gates(Strict):
    fidelity: str | None = Field(default=None, description="a fidelity design id whose verdict must be 'passed'")
    memory_mib: float | None = Field(default=None, ge=0, description="largest allowed increase of peak GPU memory per GPU")


class DesignFile(Strict):
    name: str = Field(min_length=1)
    kind: Kind = "speed"
    hypothesis: str = ""
    arms: dict[str, ArmSpec]
    blocks: int = Field(ge=1, le=1000)
    starts_per_arm: int = Field(default=1, ge=1)
    workload: str | None = None
    workload_hash: str | None = None
    replay: ReplaySettings = ReplaySettings()
    primary_metric: str = "verify_step_ms"
    direction: Literal["lower", "higher"] | None = None
    rule: DesignRule
    secondary: list[str] = Field(default_factory=list)
    stopping: Literal["none", "curtail"] = "none"
    failure_policy: Literal["drop_block", "invalidate"] = "drop_block"
    gates: Gates = Gates()
    fidelity: FidelitySpec = FidelitySpec()
    agent: AgentSpec = AgentSpec()

    @model_validator(mode="after")
    def _arms(self) -> DesignFile:
        if sorted(self.arms) != sorted(ARMS):
            raise ValueError(f"arms must be exactly `served` and `candidate` (got {', '.join(sorted(self.arms)) or 'none'})")
        return self


class FrozenDesign(Strict):
    """What is hashed and stored: the design file with recipes resolved and the workload hash pinned."""

    design: DesignFile
    recipes: dict[str, ResolvedRecipe | None]
    workload_path: str | None
    workload_hash: str | None
    direction: Literal["lower", "higher"]


def load_design(path: str | Path) -> DesignFile:
    path = Path(path)
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text())
    except FileNotFoundError as exc:
        raise DesignError("file not found", path=path) from exc
    except tomllib.TOMLDecodeError as exc:
        raise DesignError(f"not valid TOML: {exc}", path=path) from exc
    try:
        return DesignFile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
        raise DesignError(msg, path=path, field=field) from exc
