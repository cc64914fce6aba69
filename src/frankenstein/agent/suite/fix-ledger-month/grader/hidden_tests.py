"""Hidden tests for fix-ledger-month."""

from datetime import date


def tx(day, amount, category="misc", account="checking"):
    from ledger.model import Transaction
    return Transaction(day=date.fromisoformat(day), account=account, amount=amount, category=category)


def test_last_day_of_month_counted():
    from ledger.report import monthly_totals
    rows = [tx("2024-01-31", -1250, "groceries"), tx("2024-01-03", -4520, "groceries")]
    assert monthly_totals(rows, 2024, 1) == {"groceries": -5770}


def test_leap_day_counted():
    from ledger.report import monthly_totals
    rows = [tx("2024-02-29", -8000, "utilities"), tx("2024-03-01", -100, "utilities")]
    assert monthly_totals(rows, 2024, 2) == {"utilities": -8000}


def test_december_last_day():
    from ledger.report import net
    rows = [tx("2023-12-31", 500), tx("2024-01-01", 700)]
    assert net(rows, 2023, 12) == 500
    assert net(rows, 2024, 1) == 700


def test_first_day_counted_once():
    from ledger.report import transactions_in_month
    rows = [tx("2024-04-01", 1), tx("2024-04-30", 2), tx("2024-05-01", 3)]
    assert [t.amount for t in transactions_in_month(rows, 2024, 4)] == [1, 2]


def test_month_range_unchanged():
    from ledger.periods import month_range
    assert month_range(2024, 2) == (date(2024, 2, 1), date(2024, 2, 29))
    assert month_range(2023, 12) == (date(2023, 12, 1), date(2023, 12, 31))


def test_in_period_inclusive():
    from ledger.periods import in_period
    assert in_period(date(2024, 1, 31), date(2024, 1, 1), date(2024, 1, 31))
    assert in_period(date(2024, 1, 1), date(2024, 1, 1), date(2024, 1, 31))
    assert not in_period(date(2024, 2, 1), date(2024, 1, 1), date(2024, 1, 31))


def test_budget_sees_month_end():
    from ledger.budget import Budget, over_budget
    rows = [tx("2024-01-31", -9000, "fun"), tx("2024-01-02", -2000, "fun")]
    assert over_budget(Budget({"fun": 10000}), rows, 2024, 1) == ["fun"]


def test_sample_report_totals():
    import os
    from ledger.io import read_csv
    from ledger.report import monthly_totals
    rows = read_csv(os.path.join(os.getcwd(), "data", "sample.csv"))
    assert monthly_totals(rows, 2024, 2) == {"eating out": -1800, "groceries": -3310, "rent": -120000,
                                             "salary": 250000, "utilities": -8000}


def test_money_still_right():
    from ledger.money import format_amount, parse_amount
    assert parse_amount("12.3") == 1230
    assert format_amount(-123456) == "-1,234.56"


def test_balances_until_inclusive():
    from ledger.report import account_balances
    rows = [tx("2024-01-31", 100, account="a"), tx("2024-02-01", 5, account="a")]
    assert account_balances(rows, until=date(2024, 1, 31)) == {"a": 100}
