"""csvstats 2.0: summary statistics of CSV columns, optionally grouped; percentiles; JSON output."""

__version__ = "2.0.0"
