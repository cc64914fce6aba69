"""Durations: parse human-written durations into seconds and format seconds back. See SPEC.md."""

UNITS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_duration(text):
    """Parse a duration (short, long or ISO 8601 form) into a whole number of seconds."""
    raise NotImplementedError


def format_duration(seconds, style="short"):
    """Format a whole number of seconds in the given style: "short", "long" or "iso"."""
    raise NotImplementedError
