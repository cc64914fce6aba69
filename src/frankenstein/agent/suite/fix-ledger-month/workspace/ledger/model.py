"""The transaction record."""

from dataclasses import dataclass
from datetime import date


@dataclass(frozen=True)
class Transaction:
    day: date
    account: str
    amount: int  # cents, negative = money out
    category: str
    memo: str = ""

    @property
    def is_expense(self):
        return self.amount < 0
