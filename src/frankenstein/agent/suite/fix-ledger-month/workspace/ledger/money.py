"""Amounts are integer cents. Floats never touch money."""

import re

_AMOUNT = re.compile(r"^\s*([+-])?\s*(\d{1,3}(?:,\d{3})*|\d+)(?:\.(\d{1,2}))?\s*$")


def parse_amount(text):
    """'1,234.5' -> 123450, '-3' -> -300, '+0.07' -> 7. Raises ValueError on anything else."""
    m = _AMOUNT.match(text)
    if not m:
        raise ValueError(f"not an amount: {text!r}")
    sign, whole, frac = m.groups()
    cents = int(whole.replace(",", "")) * 100 + int((frac or "0").ljust(2, "0"))
    return -cents if sign == "-" else cents


def format_amount(cents):
    """123450 -> '1,234.50', -7 -> '-0.07'."""
    sign = "-" if cents < 0 else ""
    whole, frac = divmod(abs(cents), 100)
    return f"{sign}{whole:,}.{frac:02d}"


def total(amounts):
    return sum(amounts, 0)
