"""MkDocs hooks (mkdocs.yml): the README as the home page, and lists as GitHub draws them.

The site's home page is README.md itself, so that the two never differ: docs/index.md holds
only the marker below, and the README's links, which point into docs/ from the top of the
repository, are rewritten to point from docs/.

The pages are written for GitHub's Markdown (CommonMark), where what belongs to a list item
is indented to the item's text (two spaces under `- `, three under `1. `). MkDocs' Markdown
(Python-Markdown) wants four spaces per level, and otherwise ends the list early or runs the
next item into a paragraph. `four_space_lists` re-indents list items to its rule, and
separates an item from a paragraph of the item before it by a blank line, as it also wants.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

MARKER = "<!-- README.md -->"
_ITEM = re.compile(r"^( *)([-*+]|\d{1,9}[.)])( +)\S")
_FENCE = re.compile(r"^ *(```|~~~)")


def readme_as_page(readme: str) -> str:
    """The README with its `docs/...` links made relative to docs/."""
    return re.sub(r"\]\(docs/", "](", readme)


def four_space_lists(markdown: str) -> str:
    """List items' content, nested items included, indented four spaces per level.

    Each open item is known by its content column (CommonMark's: where its text starts); a
    line belongs to the innermost item whose column it reaches, and keeps its indentation
    beyond that column. A line after a blank one that reaches no item's column closes them.
    """
    out: list[str] = []
    columns: list[int] = []  # the content column of each open item, outermost first
    fence = ""
    blank_before = False
    loose = False  # a blank line inside the items since the last item began
    for line in markdown.split("\n"):
        indent = len(line) - len(line.lstrip(" "))
        if fence:  # inside a fenced block: shifted with its item, never parsed
            out.append(_shifted(line, indent, columns))
            if line.strip().startswith(fence):
                fence = ""
            continue
        if not line.strip():
            out.append("")
            blank_before = True
            loose = bool(columns)
            continue
        item = _ITEM.match(line)
        if item:
            while columns and indent < columns[-1]:
                columns.pop()
            new = 4 * len(columns)
            if loose and out and out[-1]:  # else the item runs into the paragraph before it
                out.append("")
            loose = False
            columns.append(indent + len(item.group(2)) + len(item.group(3)))
            out.append(" " * new + line[indent:])
        else:
            if blank_before:
                while columns and indent < columns[-1]:
                    columns.pop()
            out.append(_shifted(line, indent, columns))
            opening = _FENCE.match(line)
            if opening:
                fence = opening.group(1)
        blank_before = False
    return "\n".join(out)


def _shifted(line: str, indent: int, columns: list[int]) -> str:
    """A line inside the open items, moved from their columns to four spaces per level."""
    for depth in range(len(columns), 0, -1):
        if indent >= columns[depth - 1]:
            return " " * (4 * depth + indent - columns[depth - 1]) + line[indent:]
    return line  # a lazy continuation line: Markdown keeps it in its paragraph as it is


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if MARKER in markdown:
        readme = Path(config.config_file_path).parent / "README.md"
        markdown = markdown.replace(MARKER, readme_as_page(readme.read_text()))
    return four_space_lists(markdown)
