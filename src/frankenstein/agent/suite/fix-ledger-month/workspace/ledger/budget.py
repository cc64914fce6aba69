"""Budgets: a monthly limit per expense category, compared with what was spent."""

from dataclasses import dataclass, field

from ledger.report import monthly_totals


@dataclass
class Budget:
    limits: dict = field(default_factory=dict)  # category -> cents (positive)

    def limit_for(self, category):
        return self.limits.get(category, 0)


def compare(budget, transactions, year, month):
    """category -> (spent, limit, left) for every budgeted category; spent is positive cents."""
    totals = monthly_totals(transactions, year, month)
    out = {}
    for category in sorted(budget.limits):
        spent = -min(totals.get(category, 0), 0)
        limit = budget.limit_for(category)
        out[category] = (spent, limit, limit - spent)
    return out


def over_budget(budget, transactions, year, month):
    return [c for c, (spent, limit, _) in compare(budget, transactions, year, month).items() if spent > limit]
