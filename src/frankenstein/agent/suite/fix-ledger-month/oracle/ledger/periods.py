"""Calendar helpers. Periods are inclusive at both ends."""

import calendar
from datetime import date


def month_range(year, month):
    """First and last day of a month: month_range(2024, 2) == (date(2024, 2, 1), date(2024, 2, 29))."""
    if not 1 <= month <= 12:
        raise ValueError(f"month must be 1..12, got {month}")
    last = calendar.monthrange(year, month)[1]
    return date(year, month, 1), date(year, month, last)


def in_period(day, start, end):
    """True when start <= day <= end."""
    return start <= day <= end


def months_between(start, end):
    """(year, month) pairs from the month of start to the month of end, inclusive."""
    if end < start:
        return []
    out = []
    y, m = start.year, start.month
    while (y, m) <= (end.year, end.month):
        out.append((y, m))
        y, m = (y + 1, 1) if m == 12 else (y, m + 1)
    return out


def quarter_of(day):
    return (day.month - 1) // 3 + 1
