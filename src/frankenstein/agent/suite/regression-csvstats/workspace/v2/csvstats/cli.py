"""python -m csvstats FILE [--by COLUMN] [--column NAME] [--percentile P] [--format table|json]"""

from __future__ import annotations

import argparse

from csvstats.fmt import as_json, table
from csvstats.group import column, group_by
from csvstats.reader import numeric_columns, read_rows
from csvstats.stats import summary


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="csvstats")
    p.add_argument("file")
    p.add_argument("--by")
    p.add_argument("--column", action="append")
    p.add_argument("--percentile", action="append", type=float, default=[])
    p.add_argument("--format", choices=("table", "json"), default="table")
    return p.parse_args(argv)


def summaries(rows, by, columns, percentiles=()):
    groups = group_by(rows, by) if by else {"all": rows}
    return [(str(label), col, summary(column(members, col), percentiles))
            for label, members in groups.items() for col in columns]


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    rows = read_rows(args.file)
    columns = args.column or numeric_columns(rows)
    result = summaries(rows, args.by, columns, args.percentile)
    print(as_json(result) if args.format == "json" else table(result))
    return 0
