"""The rule table and what every rule shares: the model base, the verdict, decide/evaluate/curtail.

A rule is a pydantic model (``extra="forbid"``) that carries its own behaviour: which exact test
it runs and on which side, when it fires, the p range still reachable while blocks remain
(curtailment), its interval, and its words. Nothing here dispatches on a rule's kind: a rule module
subclasses :class:`BlockRule` and registers itself with :func:`register_rule`, and the design-file
field :data:`Rule` looks the kind up in the table when it validates.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import (
    BaseModel,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    PlainSerializer,
    PlainValidator,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
    field_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

from frankenstein.design import stats
from frankenstein.errors import AnalysisError
from frankenstein.validation import FrozenUserFile

Direction = Literal["lower", "higher"]
DataKind = Literal["ratio", "difference"]
Word = Literal["confirmed", "not confirmed", "harm shown", "invalid"]
Fired = Literal["better", "worse"] | None
Looks = Literal["better", "worse", "either"]


def _to_fraction(v: object) -> Fraction:
    if isinstance(v, (Fraction, int)) and not isinstance(v, bool):
        return Fraction(v)
    if isinstance(v, str):
        try:
            return Fraction(v)
        except ValueError as exc:
            raise ValueError(f"not an exact fraction: {v!r}") from exc
    raise ValueError(f"an exact fraction is written as a string like '1/32', got {v!r}")


ExactFraction = Annotated[
    Fraction,
    PlainValidator(_to_fraction),
    PlainSerializer(str, return_type=str),
    WithJsonSchema({"type": "string", "examples": ["1/32"]}),
]


class _Model(FrozenUserFile):
    """A rule's fields: part of a user-written design file."""


@dataclass(frozen=True)
class RuleResult:
    """What a rule's test says about a full set of gains: exact p, the side it fired on (or None), scipy's p, why."""

    p: Fraction
    fired: Fired
    p_scipy: float | None
    why: str


class BlockRule(_Model):
    """Base of every block rule. Subclasses set ``kind`` (a Literal) and override what differs.

    The defaults describe a one-sided exact test (``test_name`` on ``side``) that fires when p <= alpha.
    """

    kind: str
    alpha: float = 0.05
    min_effect: float | None = Field(None, ge=0)

    @field_validator("alpha")
    @classmethod
    def _alpha_in_range(cls, value: float) -> float:
        """(0, 0.5]: above 1/2 a one-sided test fires more often than not with no effect, and the interval
        at level 1 - 2*alpha turns inside out."""
        if not 0 < value <= 0.5:
            raise ValueError(f"must be above 0 and at most 0.5 (0.05 is usual), got {value:g}")
        return value

    test_name: ClassVar[stats.TestName] = "sign"
    interval_decides: ClassVar[bool] = True  # False: the interval beside the verdict is descriptive only
    summary: ClassVar[str] = ""  # one line: what the rule decides (docs, `frank design --help`)

    # -- the test ------------------------------------------------------------------------------------
    def test_side(self) -> stats.Side:
        """The side of the exact test, in scipy's words ('greater' = gains tend to be positive)."""
        return "greater"

    def tested(self, g: Sequence[float], direction: Direction, data: DataKind) -> list[float]:
        """The gains the test runs on: a threshold rule shifts them by its threshold; others take them as they are."""
        return list(g)

    def tests_differences(self) -> bool:
        """Whether the rule tests differences (candidate - served) even where start-level values give ratios."""
        return False

    def describe(self) -> str:
        """One line for a rule the verdict table does not describe itself."""
        return type(self).summary or self.kind

    def interval_values(self, values: Sequence[float]) -> list[float]:
        """The values the interval inverts the rule's test over (a rule over pairs of blocks: pair means)."""
        return list(values)

    def shape_problem(self, blocks: int, order: str | None, failure_policy: str) -> tuple[str, str] | None:
        """(field, why) when a design of this shape cannot carry the rule (registration refuses), else None."""
        return None

    def looks_for(self) -> Looks:
        return "worse" if self.test_side() == "less" else "either" if self.test_side() == "two-sided" else "better"

    def smallest_p(self, n: int) -> Fraction:
        return stats.smallest_p(self.test_name, n, self.test_side())

    # -- what it takes, in words (before registration) -----------------------------------------------
    def smallest_p_with(self, k: int, n: int) -> Fraction:
        """The smallest p the rule's test can give when k of n blocks favour the side it looks for and the
        rest go against: the sign test's p of k of n; a sign-flip test's 1/2**k (k gains that outweigh
        the rest keep 2**(n-k) of the 2**n assignments at least as large); doubled two-sided."""
        if self.test_name == "sign":
            p = stats.sign_test(k, n, cross_check=False).p
        else:
            p = Fraction(1, 2**k)
        return min(Fraction(1), 2 * p) if self.test_side() == "two-sided" else p

    def fewest_favouring(self, n: int) -> int | None:
        """The fewest of n blocks that must favour the side looked for before the rule can fire; None: never."""
        alpha = stats.exact_fraction(self.alpha)
        return next((k for k in range(n + 1) if self.smallest_p_with(k, n) <= alpha), None)

    def favour_words(self) -> str:
        """What a block does when it counts for the rule."""
        return {"worse": "favour the served arm", "either": "favour one arm"}.get(
            self.looks_for(), "favour the candidate"
        )

    def requirement(self, n: int) -> str:
        """The rule's requirement at n blocks in words: 'at 5 blocks this rule confirms only if all 5
        favour the candidate'. A necessary condition: a sign-flip test also weighs the sizes."""
        verb, base = {"worse": ("shows harm", "show harm"), "either": ("fires", "fire")}.get(
            self.looks_for(), ("confirms", "confirm")
        )
        k = self.fewest_favouring(n)
        if k is None:
            smallest = float(self.smallest_p_with(n, n))
            return f"at {n} blocks this rule can never {base}: its smallest p, {smallest:.4g}, is above alpha = {self.alpha:g}"
        count = f"all {n}" if k == n else f"at least {k} of {n}"
        return f"at {n} blocks this rule {verb} only if {count} {self.favour_words()}{self.requirement_extra()}"

    def requirement_extra(self) -> str:
        """What else the rule needs beside the count (a practical threshold)."""
        return "" if self.min_effect is None else f", and the estimate clears min_effect = {self.min_effect:g}"

    def run_test(self, g: Sequence[float], cross_check: bool) -> RuleResult:
        alpha = stats.exact_fraction(self.alpha)
        if self.test_name == "sign":
            k = _count_toward(g, self.test_side())
            st = stats.sign_test(k, len(g), cross_check=cross_check)
            p, p_scipy = st.p, (st.p_scipy if cross_check else None)
        else:
            try:
                p = stats.sign_flip_p(g, self.test_side())
            except ValueError as exc:  # too large to compute exactly
                raise AnalysisError(str(exc)) from exc
            n = len(g)
            p_scipy = (
                stats.sign_flip_p_scipy(g, self.test_side())
                if cross_check and 2 <= n <= stats.SCIPY_CROSS_CHECK_BLOCKS
                else None
            )
        return RuleResult(p, self._fired(g, p, alpha), p_scipy, _p_reason(p, alpha))

    def _fired(self, g: Sequence[float], p: Fraction, alpha: Fraction) -> Fired:
        if p > alpha:
            return None
        looks = self.looks_for()
        if looks != "either":
            return looks
        return "better" if stats.safe_mean(g) > 0 else "worse"

    # -- curtailment ---------------------------------------------------------------------------------
    def p_range(self, done: Sequence[float], remaining: int) -> tuple[Fraction, Fraction]:
        """(smallest, largest) p over every completion of ``remaining`` blocks of any value: true bounds."""
        if self.test_name == "sign":
            return stats.sign_p_range(_count_toward(done, self.test_side()), len(done), remaining)
        return stats.sign_flip_p_range(done, remaining, self.test_side())

    def outcomes(self, done: Sequence[float], remaining: int) -> frozenset[Fired]:
        """Every firing (better, worse, None) some completion could give; may include too many, never too few."""
        alpha = stats.exact_fraction(self.alpha)
        lo, hi = self.p_range(done, remaining)
        looks = self.looks_for()
        sides: set[Fired] = {"better", "worse"} if looks == "either" else {looks}
        out: set[Fired] = set()
        if lo <= alpha:
            out |= sides
        if hi > alpha or looks == "either" or (self.min_effect is not None and remaining > 0):
            out.add(None)  # a completion may miss alpha; or the estimate may fall short of min_effect
        return frozenset(out)

    # -- interval and words --------------------------------------------------------------------------
    def interval_tail(self) -> Fraction:
        return stats.exact_fraction(self.alpha) / (2 if self.test_side() == "two-sided" else 1)

    def word(self, fired: Fired) -> Word:
        return "confirmed" if fired == "better" else "harm shown" if fired == "worse" else "not confirmed"

    def harm_margin(self) -> float | None:
        """A registered non-inferiority margin (the harm rule's ``margin``), or None."""
        return None

    def phrase(self, word: Word) -> str:
        """The word as printed: a harm rule that did not fire says 'no harm shown'."""
        if word == "not confirmed" and self.looks_for() == "worse":
            return "no harm shown"
        return word

    def exact_power(self, n: int, q: float) -> float | None:
        """Power at n blocks when each block favours the side looked for with probability q, if it is
        exact (a count test without min_effect); None: the planner simulates through decide()."""
        if self.test_name != "sign" or self.min_effect is not None:
            return None
        c = stats.sign_critical_count(n, self.alpha)
        return 0.0 if c is None else float(sum(math.comb(n, j) * q**j * (1 - q) ** (n - j) for j in range(c, n + 1)))

    def computable(self, n: int, data: DataKind, max_abs: int | None = None) -> str | None:
        """Why n blocks of this data cannot be computed exactly (refuse at registration), or None."""
        if self.test_name == "sign":
            return None
        return stats.sign_flip_unsupported(n, data == "difference" and max_abs is not None, max_abs)


def _count_toward(g: Sequence[float], side: stats.Side) -> int:
    return sum(1 for x in g if (x < 0 if side == "less" else x > 0))


def _p_reason(p: Fraction, alpha: Fraction) -> str:
    return f"p {'<=' if p <= alpha else '>'} alpha = {float(alpha):g}"


# -- the table -----------------------------------------------------------------------------------------
RULES: dict[str, type[BlockRule]] = {}
R = TypeVar("R", bound=type[BlockRule])


def register_rule(cls: R) -> R:
    """Class decorator: add a rule to the table under its ``kind`` default. A rule module needs nothing else."""
    field = cls.__pydantic_fields__.get("kind")
    kind = field.default if field else None
    if not isinstance(kind, str) or not kind:
        raise TypeError(f"{cls.__name__} needs a default `kind`")
    if kind in RULES and RULES[kind] is not cls:
        raise ValueError(f"rule kind {kind!r} is already registered by {RULES[kind].__name__}")
    RULES[kind] = cls
    return cls


def rule_kinds() -> tuple[str, ...]:
    return tuple(RULES)


def _validator(extra: tuple[type[BaseModel], ...]) -> Callable[[Any], Any]:
    def validate(value: Any) -> Any:
        if isinstance(value, (BlockRule, *extra)):
            return value
        if not isinstance(value, dict):
            raise PydanticCustomError("rule_type", "a rule is a table with a `kind`")
        table: dict[str, type[BaseModel]] = {**RULES, **{c.__pydantic_fields__["kind"].default: c for c in extra}}
        kind = value.get("kind")
        if kind not in table:
            msg = f"kind must be one of {', '.join(table)}, got {kind!r}"
            raise PydanticCustomError("rule_kind", msg.replace("{", "{{").replace("}", "}}"))
        return table[kind].model_validate(value)

    return validate


def _dump(rule: BaseModel) -> dict[str, Any]:
    return rule.model_dump(mode="json")


class RuleField:
    """Annotated metadata of a rule field: validates any rule in the table (looked up by ``kind`` when
    it validates, so a rule registered later is accepted) or one of ``extra`` (e.g. the fidelity rule).

        rule: Annotated[Union[BlockRule, FidelityRule], RuleField(FidelityRule)]
    """

    def __init__(self, *extra: type[BaseModel]) -> None:
        self.extra = extra

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            _validator(self.extra), serialization=core_schema.plain_serializer_function_ser_schema(_dump)
        )

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        kinds = [*RULES, *(c.__pydantic_fields__["kind"].default for c in self.extra)]
        return {
            "type": "object",
            "description": "a decision rule, chosen by `kind`",
            "properties": {"kind": {"enum": kinds}},
            "required": ["kind"],
        }


def rule_field(*extra: type[BaseModel]) -> RuleField:
    """The metadata of a design-file rule field (see :class:`RuleField`)."""
    return RuleField(*extra)


Rule = Annotated[BlockRule, RuleField()]
RULE_ADAPTER: TypeAdapter[BlockRule] = TypeAdapter(Rule)


def parse_rule(
    kind: str,
    *,
    alpha: float = 0.05,
    side: str | None = None,
    min_effect: float | None = None,
    test: str | None = None,
    by: float | None = None,
    unit: str | None = None,
    margin: float | None = None,
) -> BlockRule:
    """Build a rule from command-line words; a bad value raises AnalysisError naming the field."""
    data: dict[str, object] = {"kind": kind, "alpha": alpha}
    if min_effect is not None:
        data["min_effect"] = min_effect
    cls = RULES.get(kind)
    options: tuple[tuple[str, str, object], ...] = (
        ("--side", "side", side),
        ("--test", "test", test),
        ("--by", "by", by),
        ("--unit", "unit", unit),
        ("--margin", "margin", margin),
    )
    for flag, name, value in options:
        if value is None:
            continue
        if cls is None or name not in cls.model_fields:
            owners = [k for k, c in RULES.items() if name in c.model_fields]
            raise AnalysisError(f"{flag} applies only to the {' and '.join(owners)} rule, not {kind!r}")
        data[name] = value
    try:
        return RULE_ADAPTER.validate_python(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"] if p != kind) or "kind"
        raise AnalysisError(f"rule {field}: {str(err['msg']).removeprefix('Value error, ')}") from exc
