"""Markdown for the report and the comparison: tables, and text from result files made safe to put in
them."""

from __future__ import annotations

import re


def md_text(value) -> str:
    """Text from a result file (a reason, a message) as it may stand in a markdown table cell: one line,
    no table break, no HTML (``<``, ``>`` and ``&`` as entities), no code span or link it could open."""
    text = " ".join(str(value).split())
    for a, b in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("|", "\\|"), ("`", "\\`"), ("[", "\\["),
                 ("]", "\\]")):
        text = text.replace(a, b)
    return text


def md_table(header: list[str], rows: list[list[str]], align: str | None = None) -> str:
    align = align or ("l" + "r" * (len(header) - 1))
    sep = ["---:" if a == "r" else ":---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def anchor(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
