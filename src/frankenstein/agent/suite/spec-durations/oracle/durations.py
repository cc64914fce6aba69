"""Durations: parse human-written durations into seconds and format seconds back. See SPEC.md."""

import re
from decimal import Decimal

UNITS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}
NAMES = {"w": "week", "d": "day", "h": "hour", "m": "minute", "s": "second"}
ALIASES = {"w": "w", "week": "w", "weeks": "w", "d": "d", "day": "d", "days": "d", "h": "h", "hour": "h",
           "hours": "h", "m": "m", "minute": "m", "minutes": "m", "min": "m", "mins": "m", "s": "s",
           "second": "s", "seconds": "s", "sec": "s", "secs": "s"}
ORDER = "wdhms"
_COMPONENT = re.compile(r"(\d+(?:\.\d+)?) *([A-Za-z]+)")
_SEP = re.compile(r"(?: *, *(?:and +)?| +and +| +|)")
_ISO = re.compile(r"(-)?P(?:(\d+)W)?(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?")


def parse_duration(text):
    """Parse a duration (short, long or ISO 8601 form) into a whole number of seconds."""
    if not isinstance(text, str):
        raise TypeError("parse_duration needs a str")
    s = text.strip()
    if not s:
        raise ValueError("empty duration")
    if s == "0":
        return 0
    if re.fullmatch(r"-?P.*", s):
        return _parse_iso(s)
    sign = 1
    if s.startswith("-"):
        sign, s = -1, s[1:]
    return sign * _parse_human(s, text)


def _parse_iso(s):
    m = _ISO.fullmatch(s)
    if not m or all(g is None for g in m.groups()[1:]) or (s.endswith("T")):
        raise ValueError(f"bad ISO duration: {s!r}")
    w, d, h, mi, se = (int(g) if g else 0 for g in m.groups()[1:])
    total = w * 604800 + d * 86400 + h * 3600 + mi * 60 + se
    return -total if m.group(1) else total


def _parse_human(s, original):
    pos, total, last = 0, Decimal(0), -1
    first = True
    while pos < len(s):
        if not first:
            sep = _SEP.match(s, pos)
            pos = sep.end()
        m = _COMPONENT.match(s, pos)
        if not m:
            raise ValueError(f"bad duration: {original!r}")
        unit = ALIASES.get(m.group(2).lower())
        if unit is None:
            raise ValueError(f"unknown unit {m.group(2)!r}")
        rank = ORDER.index(unit)
        if rank <= last:
            raise ValueError(f"units out of order or repeated in {original!r}")
        last = rank
        total += Decimal(m.group(1)) * UNITS[unit]
        pos = m.end()
        first = False
    if first:
        raise ValueError(f"bad duration: {original!r}")
    if total != total.to_integral_value():
        raise ValueError(f"not a whole number of seconds: {original!r}")
    return int(total)


def _split(n):
    out = []
    for unit in ORDER:
        q, n = divmod(n, UNITS[unit])
        out.append((unit, q))
    return [(u, q) for u, q in out if q]


def format_duration(seconds, style="short"):
    """Format a whole number of seconds in the given style: "short", "long" or "iso"."""
    if isinstance(seconds, bool) or not isinstance(seconds, int):
        raise TypeError("format_duration needs an int")
    if style not in ("short", "long", "iso"):
        raise ValueError(f"unknown style {style!r}")
    sign = "-" if seconds < 0 else ""
    parts = _split(abs(seconds))
    if style == "short":
        return sign + (" ".join(f"{q}{u}" for u, q in parts) or "0s")
    if style == "long":
        words = [f"{q} {NAMES[u]}{'' if q == 1 else 's'}" for u, q in parts] or ["0 seconds"]
        if len(words) == 1:
            return sign + words[0]
        return sign + ", ".join(words[:-1]) + " and " + words[-1]
    return sign + _iso(abs(seconds))


def _iso(n):
    days, n = divmod(n, 86400)
    h, n = divmod(n, 3600)
    m, s = divmod(n, 60)
    date = f"{days}D" if days else ""
    time = "".join(f"{v}{u}" for v, u in ((h, "H"), (m, "M"), (s, "S")) if v)
    if not date and not time:
        return "PT0S"
    return "P" + date + ("T" + time if time else "")
