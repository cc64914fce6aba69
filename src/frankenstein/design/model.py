"""Design files (TOML, pydantic, ``extra="forbid"``).

A design names its kind, two arms (``served`` and ``candidate``), the blocks, the workload and its
hash, replay settings, the primary metric and its direction, the decision rule and alpha, secondary
metrics (reported, not tested), the stopping rule, the failure policy, gates and a hypothesis.
At registration the arms' recipes are resolved and frozen into the design, so what runs is exactly
what was registered even if ``frank.toml`` changes later.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from frankenstein.config import Command, Name, ResolvedRecipe, check_name, command_problem, program_problem
from frankenstein.design.rules import BlockRule, RuleField
from frankenstein.engines import traits_of
from frankenstein.design.veto import Veto
from frankenstein.errors import ConfigError, DesignError
from frankenstein.measure.metrics import Metric
from frankenstein.measure.usermetrics import UserMetric, known
from frankenstein.validation import UserFile, field_error, read_toml
from frankenstein.workload.replay import ReplaySettings

Kind = Literal["speed", "fidelity", "agent", "screen", "aa", "memory", "fidelity_aa"]
ARMS = ("served", "candidate")
# Documented bounds (docs/designs.md): a design beyond them would take years of engine starts, and
# building its schedule alone would exhaust memory at registration.
MAX_BLOCKS = 1000
MAX_STARTS_PER_ARM = 100


class ArmSpec(UserFile):
    """A recipe (by name, ``served`` for the served recipe) plus parts, or a command that prints JSON metrics."""

    recipe: str | None = None
    parts: list[str] = Field(default_factory=list)
    command: Command | None = None

    @model_validator(mode="after")
    def _one_of(self) -> ArmSpec:
        if (self.recipe is None) == (self.command is None):
            raise ValueError("an arm needs exactly one of `recipe` or `command`")
        if self.command is not None and self.parts:
            raise ValueError("a command arm takes no parts")
        return self


class FidelityRule(UserFile):
    """Mean KL ≤ tolerance and fewer than ``max_positions_above`` positions above ``threshold`` (nats), on a
    lower bound that is only valid where the top-k bins hold the served mass (``min_captured_mass`` per
    position, ``min_captured_mass_mean`` on average) and the noise floor is below the tolerance; with a
    ``margin``, also an equivalence test against the engine's own noise: the one-sided ``1 - alpha`` upper
    bound of the candidate's excess KL over the noise floor is below the margin (at least 3 starts per
    arm; see :mod:`frankenstein.fidelity.equivalence` and :mod:`frankenstein.fidelity.gate`).

    Designs registered before ``margin`` and ``alpha`` existed load with ``margin = None``: their rule is
    the one they registered (the stored design spells out every field it had, captured-mass floors too)."""

    kind: Literal["fidelity"] = "fidelity"
    tolerance: float = Field(ge=0, description="mean KL (nats) allowed")
    threshold: float = Field(default=0.5, gt=0, description="KL (nats) above which a position counts")
    max_positions_above: int = Field(default=1, ge=1, description="fewer than this many positions above threshold")
    min_captured_mass: float = Field(
        default=0.9,
        ge=0,
        le=1,
        description=(
            "served probability the shared top-k bins must hold at every position; below it a position (and so the "
            "verdict) is invalid"
        ),
    )
    min_captured_mass_mean: float = Field(
        default=0.99,
        ge=0,
        le=1,
        description=(
            "mean over positions of the served probability in the shared bins; below it the verdict is invalid"
        ),
    )
    margin: float | None = Field(
        default=None,
        gt=0,
        description=(
            "largest excess KL (nats) of candidate-vs-served over served-vs-served start pairs that the candidate "
            "may add; its one-sided upper bound must be below it (needs at least 3 starts per arm)"
        ),
    )
    alpha: float = Field(default=0.05, gt=0, le=0.5, description="one-sided level of the excess bound")


class MemoryRule(UserFile):
    """A memory design's rule: the candidate's peak memory (engine process tree RSS, and each GPU where one was
    sampled) at most ``max_increase_mib`` above the served arm's (see :mod:`frankenstein.design.kinds.memory`)."""

    kind: Literal["memory"] = "memory"
    max_increase_mib: float = Field(ge=0, allow_inf_nan=False, description="largest allowed increase of peak memory")


# any rule in the table, or fidelity, or memory
DesignRule = Annotated[BlockRule | FidelityRule | MemoryRule, RuleField(FidelityRule, MemoryRule)]


class FidelitySpec(UserFile):
    top_k: int = Field(default=64, ge=1)
    max_positions: int | None = Field(default=None, ge=1)


class AgentSpec(UserFile):
    suite: str = Field(default="pkg:suite", description="task suite folder; pkg:suite is the shipped one")
    tasks: list[str] | None = Field(default=None, description="task ids to run (default: all)")
    draws: int = Field(default=1, ge=1, description="draws per start; one draw runs every task once")
    limits: dict[str, float] = Field(default_factory=dict, description="task limit overrides, e.g. turns = 4")
    temperature: float = 0.0


class Gates(UserFile):
    fidelity: str | None = Field(default=None, description="a fidelity design id whose verdict must be 'passed'")
    memory: str | None = Field(
        default=None, description="a memory design id (same part, same served recipe) whose verdict must be 'passed'"
    )
    memory_mib: float | None = Field(
        default=None, ge=0, description="largest allowed increase of peak GPU memory per GPU"
    )


class DesignFile(UserFile):
    name: Name
    kind: Kind = "speed"
    hypothesis: str = ""
    arms: dict[str, ArmSpec]
    blocks: int = Field(ge=1, le=MAX_BLOCKS)
    starts_per_arm: int = Field(default=1, ge=1, le=MAX_STARTS_PER_ARM)
    workload: str | None = None
    workload_hash: str | None = None
    replay: ReplaySettings = ReplaySettings()
    primary_metric: str = "verify_step_ms"
    direction: Literal["lower", "higher"] | None = None
    rule: DesignRule
    secondary: list[str] = Field(default_factory=list)
    stopping: Literal["none", "curtail"] = "none"
    # -- design shape (issue 28, decide): kept together
    layout: Literal["paired", "unpaired"] = Field(
        default="paired",
        description=(
            "paired: every block holds each arm's starts in a random order; unpaired: one block of "
            "starts_per_arm starts per arm in one random order, decided by the exact two-sample test"
        ),
    )
    order: Literal["independent", "balanced"] | None = Field(
        default=None,
        description=(
            "how the arm orders are drawn: balanced = counter-balanced in pairs of blocks (the second block "
            "of a pair runs the first's order with the arms swapped), independent = each block on its own; registration "
            "freezes balanced when unset, and designs registered before this field were drawn independently"
        ),
    )
    failure_policy: Literal["drop_block", "invalidate"] = "drop_block"
    cache: Literal["warm", "cold"] = Field(
        default="warm",
        description="engine cache folders per arm: warm = kept across the arm's starts, cold = empty per start",
    )
    gates: Gates = Gates()
    vetoes: list[Veto] = Field(
        default_factory=list, description="secondary metrics with their own rule; adopt refuses on any failed veto"
    )
    fidelity: FidelitySpec = FidelitySpec()
    agent: AgentSpec = AgentSpec()
    predicts: str | None = Field(
        default=None,
        description='the effect a later design of the same part should see, in the primary metric\'s unit: "-0.42 ms"',
    )
    limits: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list,
        description="what the result does not show, in the authors' words; printed after the generated limits",
    )

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """``limits`` and ``vetoes`` are left out when empty (``predicts`` when None), so designs registered before it existed keep their
        canonical text (and hash)."""
        out: dict[str, Any] = handler(self)
        if not out.get("limits", True):
            del out["limits"]
        if not out.get("vetoes", True):
            del out["vetoes"]
        if "predicts" in out and out["predicts"] is None:
            del out["predicts"]
        return out

    @model_validator(mode="after")
    def _arms(self) -> DesignFile:
        if self.family:  # served and two or more named candidates
            for name in self.candidates:
                try:
                    check_name(name)
                except ValueError as exc:
                    raise PydanticCustomError("family", "{field}: {why}", {"field": f"arms.{name}", "why": str(exc)})
            if self.layout == "unpaired":
                why = "a family of candidates runs in paired blocks (one start of each arm per block)"
                raise PydanticCustomError("family", "{field}: {why}", {"field": "layout", "why": why})
            return self
        if sorted(self.arms) != sorted(ARMS):
            raise ValueError(
                f"arms must be exactly `served` and `candidate`, or `served` and two or more named candidates "
                f"(got {', '.join(sorted(self.arms)) or 'none'})"
            )
        return self

    # -- candidate families (issue 28, decide): kept together
    @property
    def family(self) -> bool:
        """Served and two or more candidates, each tested against served in the same blocks."""
        return len(self.arms) > 2 and "served" in self.arms

    @property
    def candidates(self) -> tuple[str, ...]:
        """The arms tested against served, in file order (``candidate`` in a two-arm design)."""
        return tuple(a for a in self.arms if a != "served")

    @property
    def arm_names(self) -> tuple[str, ...]:
        """Every arm, served first: ARMS for a two-arm design (the order its draw has always used)."""
        return ("served", *self.candidates) if self.family else ARMS

    @field_validator("rule", mode="before")
    @classmethod
    def _rule_kind_is_text(cls, value: object) -> object:
        if isinstance(value, dict) and not isinstance(value.get("kind", ""), str):
            raise PydanticCustomError(
                "rule_kind",
                "{field}: {why}",
                {"field": "rule.kind", "why": f"must be a rule's name, got {value['kind']!r}"},
            )
        return value

    @model_validator(mode="after")
    def _unpaired_shape(self) -> DesignFile:
        if self.layout != "unpaired":
            return self
        if self.blocks != 1:
            why = "an unpaired design is one block of starts_per_arm starts per arm in one random order: blocks = 1"
            raise PydanticCustomError("unpaired", "{field}: {why}", {"field": "blocks", "why": why})
        if self.stopping != "none":
            why = 'an unpaired design runs every start (no curtailment): stopping = "none"'
            raise PydanticCustomError("unpaired", "{field}: {why}", {"field": "stopping", "why": why})
        return self

    @model_validator(mode="after")
    def _can_finish(self) -> DesignFile:
        """Refuse settings with which no start could measure anything (each would fail the same way)."""
        problem = finish_problem(self)
        if problem:
            raise PydanticCustomError("cannot_finish", "{field}: {why}", {"field": problem[0], "why": problem[1]})
        return self


def finish_problem(design: DesignFile) -> tuple[str, str] | None:
    """(field, why) for a setting that makes every start fail or measure nothing, else None."""
    r = design.replay
    if not math.isfinite(r.temperature) or r.temperature < 0:
        return "replay.temperature", f"must be a finite number >= 0, got {r.temperature}"
    if r.max_turns is not None and r.warmup_turns >= r.max_turns:
        return "replay.warmup_turns", (
            f"{r.warmup_turns} warm-up turns of at most {r.max_turns} leave no "
            "measured turn; lower warmup_turns or raise max_turns"
        )
    if r.rate is None and "arrivals" in r.model_fields_set:
        return "replay.arrivals", "arrivals shape a request rate: set replay.rate (requests per second) too"
    if not math.isfinite(design.agent.temperature) or design.agent.temperature < 0:
        return "agent.temperature", f"must be a finite number >= 0, got {design.agent.temperature}"
    for name, value in design.agent.limits.items():
        if not math.isfinite(value) or value <= 0:
            return f"agent.limits.{name}", f"must be a finite number > 0, got {value}"
    return None


def resolve_arms(
    resolve: Callable[[str], ResolvedRecipe | None], path: Path, arms: tuple[str, ...] = ARMS
) -> dict[str, ResolvedRecipe | None]:
    """Each arm's recipe via ``resolve(arm)``; an unknown recipe or part is refused naming the design
    file and the arm, and so is a recipe that cannot start (:func:`check_launchable`)."""
    recipes = {}
    for arm in arms:
        try:
            recipes[arm] = resolve(arm)
        except ConfigError as exc:
            if isinstance(exc, DesignError):
                raise
            raise DesignError(str(exc), path=path, field=f"arms.{arm}") from exc
    check_launchable(recipes, path)
    return recipes


def check_launchable(recipes: dict[str, ResolvedRecipe | None], path: Path) -> None:
    """Registration refuses an arm whose recipe cannot start (e.g. its model file is missing):
    every run would stop at that slot, recording nothing."""
    for arm, recipe in recipes.items():
        problem = (program_problem(recipe) or traits_of(recipe.engine).launch_problem(recipe)) if recipe else None
        if problem:
            raise DesignError(f"{problem} (recipe {recipe.name})", path=path, field=f"arms.{arm}")  # type: ignore[union-attr]


def check_command_arms(design: DesignFile, path: Path) -> None:
    """Registration refuses a command arm whose program cannot be executed: every start would fail the same way."""
    for arm, spec in design.arms.items():
        problem = command_problem(spec.command) if spec.command is not None else None
        if problem:
            raise DesignError(problem, path=path, field=f"arms.{arm}.command")


class FrozenDesign(UserFile):
    """What is hashed and stored: the design file with recipes resolved and the workload hash pinned."""

    design: DesignFile
    recipes: dict[str, ResolvedRecipe | None]
    workload_path: str | None
    workload_hash: str | None
    direction: Literal["lower", "higher"]
    # arm -> the files its starts run ({arm, role, path, sha256}, design/pins.py), pinned at registration.
    # Designs registered before this field have none: a cluster run then pins the driver's files at its start.
    files: dict[str, list[dict[str, str]]] = Field(default_factory=dict)
    # The user metrics (frank.toml [metrics.NAME]) the design names, as declared when it was registered.
    metrics: dict[str, UserMetric] = Field(default_factory=dict)


def load_design(path: str | Path) -> DesignFile:
    path = Path(path)
    data = read_toml(path, DesignError)
    try:
        return DesignFile.model_validate(data)
    except ValidationError as exc:
        raise field_error(path, exc, DesignError) from exc


@dataclass(frozen=True)
class Registered:
    """A design as the registry holds it: frozen, hashed, with its seed and the arm order of every block."""

    seq: int
    design_id: str
    frozen: FrozenDesign
    design_hash: str
    seed: str
    schedule: list[list[str]]
    registered_at: str
    source_sha256: str

    @property
    def design(self) -> DesignFile:
        return self.frozen.design

    @property
    def order(self) -> Literal["independent", "balanced"]:
        """How the arm orders were drawn (a design registered before ``order`` existed: independently)."""
        return self.design.order or "independent"

    def metric(self, name: str) -> Metric | None:
        """A metric the design can name: built-in, or a user metric as registered."""
        return known(self.frozen.metrics).get(name)

    def unit(self, name: str) -> str:
        """The unit of a metric the design names ("" for one the registry does not know)."""
        m = self.metric(name)
        return m.unit if m else ""

    def label(self, name: str) -> str:
        """A metric's axis label: its name and unit, ``time_per_job_ms (ms)``."""
        unit = self.unit(name)
        return f"{name} ({unit})" if unit else name

    def slots(self) -> list[Slot]:
        """Every start the design registered, in run order: block, position in the block, arm, repeat."""
        out = []
        for b, order in enumerate(self.schedule):
            seen: dict[str, int] = {}
            for pos, arm in enumerate(order):
                out.append(Slot(b, pos, arm, seen.get(arm, 0)))
                seen[arm] = seen.get(arm, 0) + 1
        return out


@dataclass(frozen=True)
class Slot:
    """One registered start: 0-based block, its position in the block's arm order, the arm, the repeat."""

    block: int
    position: int
    arm: str
    rep: int
