"""Read a CSV file into columns, inferring numbers."""

import csv


def convert(text):
    text = text.strip()
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def read_rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        return [{k: convert(v) for k, v in row.items()} for row in csv.DictReader(f)]


def numeric_columns(rows):
    if not rows:
        return []
    return [k for k in rows[0] if all(isinstance(r[k], (int, float)) for r in rows)]
