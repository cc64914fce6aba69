"""The note as one HTML file (``note.html`` beside ``note.md``): the same lines, the plots inline.

    note_html(lines, images) -> str      ``images``: plot file name -> PNG bytes

A small, fixed subset of Markdown is turned into HTML, exactly the subset the note's formatters write:
``#``/``##``/``###`` headings, ``- `` bullets, pipe tables (with their ``---:`` alignment), fenced text
blocks, ``![alt](file.png)`` images and paragraphs; inline ``code`` and ``**bold**``. Every plot is embedded
as a ``data:image/png;base64`` URI, the style sheet is inline, and there is no script and no external
reference: the file reads the same offline, in any browser, with JavaScript off.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator, Sequence
from html import escape

STYLE = """
body { font: 16px/1.5 Georgia, 'Times New Roman', serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem;
       color: #1d1d1f; }
h1 { font-size: 1.8rem; } h2 { font-size: 1.35rem; margin-top: 2.2rem; border-bottom: 1px solid #ddd; }
h3 { font-size: 1.1rem; }
table { border-collapse: collapse; margin: 0.8rem 0; font: 13px/1.35 Menlo, Consolas, monospace; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.45rem; vertical-align: top; }
th { background: #f3f3f3; } td.r, th.r { text-align: right; }
code, pre { font-family: Menlo, Consolas, monospace; font-size: 0.9em; background: #f6f6f6; }
pre { padding: 0.6rem; overflow-x: auto; }
img { max-width: 100%; height: auto; display: block; margin: 0.8rem 0; }
"""

IMAGE = re.compile(r"^!\[(?P<alt>[^\]]*)\]\((?P<src>[^)]+)\)$")
RULE = re.compile(r"^\| ?(:?-{3,}:?)( \| (:?-{3,}:?))* ?\|$")


def inline(text: str) -> str:
    """Escape, then ``code`` spans and ``**bold**`` (code first: nothing inside a code span is bold)."""
    out = []
    for i, piece in enumerate(text.split("`")):
        if i % 2:
            out.append(f"<code>{escape(piece)}</code>")
        else:
            out.append(re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", escape(piece)))
    return "".join(out)


def cells(line: str) -> list[str]:
    """A pipe-table line's cells, with ``\\|`` kept as a literal bar."""
    body = line.strip()[2:-2]  # md_table writes "| a | b |"
    return [p.strip().replace("\\|", "|") for p in re.split(r"(?<!\\) \| ", body)]


def table(lines: Sequence[str]) -> str:
    head, rule, rows = cells(lines[0]), cells(lines[1]), [cells(x) for x in lines[2:]]
    align = ["r" if c.endswith(":") else "l" for c in rule]

    def row(tag: str, values: list[str]) -> str:
        return "<tr>" + "".join(f'<{tag} class="{a}">{inline(v)}</{tag}>' for v, a in zip(values, align)) + "</tr>"

    body = "".join(row("td", r) for r in rows)
    return f"<table><thead>{row('th', head)}</thead><tbody>{body}</tbody></table>"


def blocks(lines: Sequence[str]) -> Iterator[tuple[str, list[str]]]:
    """(kind, lines): heading, bullets, table, pre, image, paragraph; blank lines separate."""
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
        elif line.startswith("```"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), len(lines))
            yield "pre", list(lines[i + 1 : end])
            i = end + 1
        elif line.startswith("#"):
            yield "heading", [line]
            i += 1
        else:
            j = i
            while j < len(lines) and lines[j].strip() and not lines[j].startswith(("#", "```")):
                j += 1
            yield _kind(lines[i:j]), list(lines[i:j])
            i = j


def _kind(group: Sequence[str]) -> str:
    if len(group) >= 2 and group[0].startswith("|") and RULE.match(group[1].strip()):
        return "table"
    if all(x.startswith("- ") for x in group):
        return "bullets"
    if len(group) == 1 and IMAGE.match(group[0].strip()):
        return "image"
    return "paragraph"


def render(kind: str, group: list[str], images: dict[str, bytes]) -> str:
    if kind == "heading":
        level = len(group[0]) - len(group[0].lstrip("#"))
        return f"<h{level}>{inline(group[0][level:].strip())}</h{level}>"
    if kind == "pre":
        return f"<pre>{escape(chr(10).join(group))}</pre>"
    if kind == "table":
        return table(group)
    if kind == "bullets":
        return "<ul>" + "".join(f"<li>{inline(x[2:])}</li>" for x in group) + "</ul>"
    if kind == "image":
        m = IMAGE.match(group[0].strip())
        assert m is not None
        return image(m["alt"], m["src"], images)
    return f"<p>{inline(' '.join(group))}</p>"


def image(alt: str, src: str, images: dict[str, bytes]) -> str:
    """The plot inline as a data URI; a plot that was not drawn says so in words (never a broken link)."""
    data = images.get(src)
    if data is None:
        return f"<p>(plot {escape(src)} not drawn)</p>"
    uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
    return f'<figure><img alt="{escape(alt)}" title="{escape(src)}" src="{uri}"></figure>'


def note_html(lines: Sequence[str], images: dict[str, bytes]) -> str:
    """The whole note as one self-contained HTML document."""
    title = next((x.lstrip("#").strip() for x in lines if x.startswith("# ")), "Progress note")
    body = "\n".join(render(kind, group, images) for kind, group in blocks(lines))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head>\n<body>\n{body}\n</body></html>\n"
    )
