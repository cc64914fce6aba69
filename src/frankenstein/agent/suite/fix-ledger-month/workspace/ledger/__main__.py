"""python -m ledger FILE YEAR MONTH: print the monthly report."""

import sys

from ledger.io import read_csv
from ledger.report import render_report


def main(argv):
    if len(argv) != 4:
        print("usage: python -m ledger FILE YEAR MONTH", file=sys.stderr)
        return 2
    rows = read_csv(argv[1])
    print(render_report(rows, int(argv[2]), int(argv[3])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
