"""python -m csvstats FILE [--by COLUMN] [--column NAME]"""

import argparse

from csvstats.fmt import table
from csvstats.group import column, group_by
from csvstats.reader import numeric_columns, read_rows
from csvstats.stats import summary


def parse_args(argv):
    p = argparse.ArgumentParser(prog="csvstats")
    p.add_argument("file")
    p.add_argument("--by")
    p.add_argument("--column", action="append")
    return p.parse_args(argv)


def summaries(rows, by, columns):
    groups = group_by(rows, by) if by else {"all": rows}
    out = []
    for label, members in groups.items():
        for col in columns:
            out.append((str(label), col, summary(column(members, col))))
    return out


def main(argv):
    args = parse_args(argv)
    rows = read_rows(args.file)
    columns = args.column or numeric_columns(rows)
    print(table(summaries(rows, args.by, columns)))
    return 0
