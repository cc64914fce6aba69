import unittest
from datetime import date

from ledger.model import Transaction
from ledger.report import account_balances, monthly_totals


def tx(day, amount, category="misc", account="checking"):
    return Transaction(day=date.fromisoformat(day), account=account, amount=amount, category=category)


class ReportTest(unittest.TestCase):
    def test_totals_per_category(self):
        rows = [tx("2024-03-05", -100, "food"), tx("2024-03-06", -50, "food"), tx("2024-03-07", 900, "pay")]
        self.assertEqual(monthly_totals(rows, 2024, 3), {"food": -150, "pay": 900})

    def test_other_months_ignored(self):
        rows = [tx("2024-02-10", -100, "food"), tx("2024-04-10", -50, "food")]
        self.assertEqual(monthly_totals(rows, 2024, 3), {})

    def test_balances(self):
        rows = [tx("2024-03-05", -100, account="a"), tx("2024-03-06", 300, account="b")]
        self.assertEqual(account_balances(rows), {"a": -100, "b": 300})


if __name__ == "__main__":
    unittest.main()
