"""csvstats 1.3: summary statistics of CSV columns, optionally grouped."""

__version__ = "1.3.0"
