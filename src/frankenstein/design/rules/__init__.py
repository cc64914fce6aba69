"""Decision rules as data, and the verdict they give on recorded blocks.

A rule is a pydantic model (``extra="forbid"``) that carries its behaviour (test, p range for
curtailment, interval, words); the table maps ``kind`` to its class. One module per rule:

    all_blocks_better   every block favours the candidate (its false-positive rate is 1/2**n)
    sign                exact one-sided sign test at alpha (ties count against the candidate)
    permutation         exact paired sign-flip test at alpha; side better | worse | two-sided
    harm                one-sided: the candidate is worse (test permutation | sign)
    all_blocks_by       every block better by at least `by` (relative, or in the metric's unit)
    mean_by             the mean better by at least `by`: exact sign-flip test beyond the threshold
    order_adjusted      exact sign-flip test over pairs of counter-balanced blocks (order effects cancel)

A new rule is one module: subclass ``BlockRule``, decorate with ``@register_rule`` and import it
(below, or from anywhere before a design is validated: the design field looks kinds up in the
table when it validates). Each rule may carry ``min_effect``: a practical threshold the point
estimate must also pass (ratio data: the geometric-mean ratio, 0.05 = 5% better; difference data:
the mean difference in its own units). ``direction`` (lower | higher) says which way is better.

Public functions:

    parse_rule(kind, alpha=..., side=..., min_effect=..., test=...)   build a Rule (AnalysisError)
    register_rule(cls), rule_kinds(), rule_field(*extra)   the table and the design-file field
    rule_test(rule)            'sign' or 'permutation': the exact test behind the rule
    smallest_p(rule, n)        smallest p the rule can reach with n blocks
    min_blocks(rule)           fewest blocks for which the rule can reach its alpha
    unreachable_reason(rule, n) why n blocks can never reach alpha, or None
    check_computable(rule, n, data_kind, max_abs=None)  why n blocks cannot be computed exactly, or None
    remaining_blocks(registered, analysed, dropped)     blocks still to run
    gains(...)                 per-block evidence for the candidate (positive = candidate better)
    decide(rule, gains, direction, data)   word + exact p from gains (the core of evaluate)
    evaluate(rule, served, candidate, direction)       -> Verdict (from start-level values)
    evaluate_differences(rule, differences, direction) -> Verdict (from candidate - served)
    evaluate_unpaired(rule, served, candidate, direction, data) -> Verdict (unpaired starts, two-sample test)
    unpaired_reason(rule, n_served, n_candidate)        why a rule cannot decide unpaired starts, or None
    decide_family(rule, served, candidates, direction)  -> Family (k candidates, Holm over exact p-values)
    family_reason(rule, n_blocks, k)                    why no candidate of k could pass, or None
    curtailed(rule, done_gains, remaining, direction, data) -> Decision every completion gives, or None
    can_change(rule, done_gains, remaining)            curtailment: can the verdict still change?
    format_difference(x)       a mean difference as read ('0 (no difference)', '+1')
"""

from __future__ import annotations

from frankenstein.design import stats
from frankenstein.design.rules.all_blocks_better import AllBlocksBetter
from frankenstein.design.rules.base import (
    RULE_ADAPTER,
    RULES,
    BlockRule,
    DataKind,
    Direction,
    ExactFraction,
    Fired,
    Rule,
    RuleField,
    RuleResult,
    Word,
    parse_rule,
    register_rule,
    rule_field,
    rule_kinds,
)
from frankenstein.design.rules.evaluate import (
    BlockRow,
    ConfidenceInterval,
    Decision,
    Verdict,
    can_change,
    check_computable,
    curtailed,
    decide,
    effect_thresholds,
    evaluate,
    evaluate_differences,
    format_difference,
    gains,
    loss_words,
    min_blocks,
    outcomes,
    remaining_blocks,
    rule_test,
    smallest_p,
    unreachable_reason,
)
from frankenstein.design.rules.family import CandidateResult, Family, decide_family, family_reason, holm
from frankenstein.design.rules.harm import HarmRule
from frankenstein.design.rules.order_adjusted import OrderAdjusted
from frankenstein.design.rules.permutation import PermutationRule
from frankenstein.design.rules.sign import SignRule
from frankenstein.design.rules.threshold import AllBlocksBy, MeanBy, ThresholdRule
from frankenstein.design.rules.unpaired import evaluate_unpaired, unpaired_reason

RULE_KINDS = rule_kinds()  # the shipped rules, at import; the table (RULES) may grow

__all__ = [
    "RULES",
    "RULE_ADAPTER",
    "RULE_KINDS",
    "AllBlocksBetter",
    "AllBlocksBy",
    "CandidateResult",
    "Family",
    "BlockRow",
    "BlockRule",
    "ConfidenceInterval",
    "DataKind",
    "Decision",
    "Direction",
    "ExactFraction",
    "Fired",
    "HarmRule",
    "MeanBy",
    "OrderAdjusted",
    "PermutationRule",
    "Rule",
    "RuleField",
    "SignRule",
    "ThresholdRule",
    "RuleResult",
    "Verdict",
    "Word",
    "can_change",
    "check_computable",
    "curtailed",
    "decide",
    "decide_family",
    "effect_thresholds",
    "evaluate",
    "evaluate_differences",
    "evaluate_unpaired",
    "family_reason",
    "format_difference",
    "gains",
    "holm",
    "loss_words",
    "min_blocks",
    "outcomes",
    "parse_rule",
    "register_rule",
    "remaining_blocks",
    "rule_field",
    "rule_kinds",
    "rule_test",
    "smallest_p",
    "stats",
    "unpaired_reason",
    "unreachable_reason",
]
