"""CSV import. Columns: date (YYYY-MM-DD), account, amount, category, memo (optional)."""

import csv
from datetime import date

from ledger.model import Transaction
from ledger.money import parse_amount

REQUIRED = ("date", "account", "amount", "category")


def parse_row(row, line):
    missing = [k for k in REQUIRED if not (row.get(k) or "").strip()]
    if missing:
        raise ValueError(f"line {line}: missing {', '.join(missing)}")
    try:
        day = date.fromisoformat(row["date"].strip())
    except ValueError:
        raise ValueError(f"line {line}: bad date {row['date']!r}") from None
    return Transaction(day=day, account=row["account"].strip(), amount=parse_amount(row["amount"]),
                       category=row["category"].strip().lower(), memo=(row.get("memo") or "").strip())


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        return [parse_row(row, i) for i, row in enumerate(reader, start=2)]
