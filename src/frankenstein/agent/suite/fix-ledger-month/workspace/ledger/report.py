"""Totals and the text report."""

from collections import defaultdict

from ledger.money import format_amount
from ledger.periods import in_period, month_range


def transactions_in_month(transactions, year, month):
    start, end = month_range(year, month)
    return [t for t in transactions if in_period(t.day, start, end)]


def monthly_totals(transactions, year, month):
    """Sum of amounts per category for one month, categories sorted."""
    sums = defaultdict(int)
    for t in transactions_in_month(transactions, year, month):
        sums[t.category] += t.amount
    return dict(sorted(sums.items()))


def account_balances(transactions, until=None):
    """Balance per account over all transactions up to and including ``until``."""
    sums = defaultdict(int)
    for t in transactions:
        if until is None or t.day <= until:
            sums[t.account] += t.amount
    return dict(sorted(sums.items()))


def net(transactions, year, month):
    return sum(t.amount for t in transactions_in_month(transactions, year, month))


def render_report(transactions, year, month):
    totals = monthly_totals(transactions, year, month)
    width = max([len(c) for c in totals] + [8])
    lines = [f"Report {year}-{month:02d}", "-" * (width + 16)]
    for category, cents in totals.items():
        lines.append(f"{category:<{width}}  {format_amount(cents):>14}")
    lines.append("-" * (width + 16))
    lines.append(f"{'net':<{width}}  {format_amount(net(transactions, year, month)):>14}")
    return "\n".join(lines)
