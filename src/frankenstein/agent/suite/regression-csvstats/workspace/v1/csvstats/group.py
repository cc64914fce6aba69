"""Group rows by a column."""


def group_by(rows, key):
    groups = {}
    for row in rows:
        groups.setdefault(row[key], []).append(row)
    return dict(sorted(groups.items()))


def column(rows, name):
    return [r[name] for r in rows]
