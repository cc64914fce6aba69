"""Text table output."""

FIELDS = ("count", "mean", "median", "stdev", "min", "max")


def number(x):
    return str(x) if isinstance(x, int) else f"{x:.2f}"


def table(summaries):
    """summaries: list of (label, column, summary dict)."""
    header = ["group", "column", *FIELDS]
    rows = [[label, col, *(number(s[f]) for f in FIELDS)] for label, col, s in summaries]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join("  ".join(str(c).rjust(w) for c, w in zip(r, widths)) for r in [header, *rows])
