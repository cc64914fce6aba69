"""ledger: import, total and report bookkeeping transactions."""

from ledger.model import Transaction
from ledger.money import format_amount, parse_amount

__all__ = ["Transaction", "format_amount", "parse_amount"]
__version__ = "1.4.2"
