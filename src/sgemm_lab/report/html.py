"""report.md as an HTML fragment, for the page `snakemake --report` opens on (workflow/report/workflow.rst
includes it), so that the report's text and tables are what a reader of the HTML report sees first.

Only the markdown the report itself writes (``sections``, ``tables``, ``summary``): headings, paragraphs,
pipe tables with an alignment row, "- " lists, inline code, bold, links and images. Every text is escaped
before the few marks are turned into tags. An image becomes a note naming the figure, which the HTML
report shows as a result of its own (figures in it are not embedded here: the fragment stays small).
"""

from __future__ import annotations

import html
import re

from .markdown import anchor

_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_IMAGE = re.compile(r"^!\[([^\]]*)\]\(([^)]*)\)\s*$")


def _inline(text: str) -> str:
    """Escaped text with the report's inline marks as tags (code spans keep their content literal)."""
    parts = _CODE.split(text)  # even: prose, odd: code
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(f"<code>{html.escape(part)}</code>")
            continue
        part = html.escape(part, quote=False)
        part = _BOLD.sub(r"<strong>\1</strong>", part)
        part = _LINK.sub(lambda m: f'<a href="{html.escape(m[2])}">{m[1]}</a>', part)
        out.append(part)
    return "".join(out)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _table(lines: list[str]) -> str:
    head, align, body = _cells(lines[0]), _cells(lines[1]), [_cells(x) for x in lines[2:]]
    side = ["right" if a.endswith(":") and not a.startswith(":") else "left" for a in align]

    def row(cells, tag):
        return "<tr>" + "".join(f'<{tag} style="text-align:{side[i] if i < len(side) else "left"}">{_inline(c)}</{tag}>'
                                for i, c in enumerate(cells)) + "</tr>"
    return ("<table>\n<thead>" + row(head, "th") + "</thead>\n<tbody>\n"
            + "\n".join(row(r, "td") for r in body) + "\n</tbody>\n</table>")


def fragment(markdown: str) -> str:
    """The HTML of ``markdown`` (the report's subset), block by block."""
    lines = markdown.splitlines()
    out, para, i = [], [], 0

    def flush():
        if para:
            out.append("<p>" + _inline(" ".join(para)) + "</p>")
            para.clear()

    while i < len(lines):
        line = lines[i]
        if not line.strip():
            flush()
            i += 1
        elif m := re.match(r"^(#{1,6}) (.*)$", line):
            flush()
            level, title = len(m[1]), m[2].strip()
            out.append(f'<h{level} id="{html.escape(anchor(title))}">{_inline(title)}</h{level}>')
            i += 1
        elif line.startswith("|") and i + 1 < len(lines) and re.match(r"^\|\s*:?-", lines[i + 1]):
            flush()
            j = i + 2
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            out.append(_table(lines[i:j]))
            i = j
        elif line.startswith("- "):
            flush()
            items = []
            while i < len(lines) and lines[i].startswith("- "):
                items.append(f"<li>{_inline(lines[i][2:])}</li>")
                i += 1
            out.append("<ul>\n" + "\n".join(items) + "\n</ul>")
        elif m := _IMAGE.match(line):
            flush()
            out.append(f'<p><em>Figure: {html.escape(m[1])} (<code>{html.escape(m[2])}</code>, shown among this '
                       "report's results)</em></p>")
            i += 1
        else:
            para.append(line.strip())
            i += 1
    flush()
    return "\n".join(out) + "\n"
