"""Spans of an answer that `split_text` must not cut blindly: emphasis runs and Markdown tables.

Emphasis within a line is Markdown's `**bold**`, `*italic*`, `_italic_`, `~~strike~~` and Slack's and
WhatsApp's `*bold*`, `_italic_`, `~strike~`. A table is a header line, its `|---|---|` line and the rows
that follow up to a blank line. Both are found in linear time (a line of stray asterisks included), so
any length is found.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass

_OPENER = re.compile(r"(?<![\w*_~])(?:\*\*|__|~~|[*_~])(?=\S)")
# A closer follows its text directly: not a space, nor its own mark ("**x**" holds no "*" run).
_CLOSERS = {
    mark: re.compile(rf"(?<![\s{re.escape(mark[0])}]){re.escape(mark)}(?![\w*_~])") for mark in ("**", "__", "~~", "*", "_", "~")
}
_TABLE_DELIMITER = re.compile(r"^ {0,3}\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")


@dataclass(frozen=True, slots=True)
class Emphasis:
    start: int  # the opening mark
    end: int  # after the closing mark
    mark: str  # "**", "_", ...


@dataclass(frozen=True, slots=True)
class Table:
    start: int  # start of the header line
    body: int  # start of the first row (after the delimiter line's newline)
    end: int  # end of the last row
    head: str  # the header and delimiter lines, each ending in a newline


def emphasis_spans(text: str) -> list[Emphasis]:
    """Each emphasis run in `text`, first opener to its nearest closer of the same mark, never across a line."""
    spans: list[Emphasis] = []
    line_start = 0
    for line in text.split("\n"):
        closers = {mark: [m.start() for m in rx.finditer(line)] for mark, rx in _CLOSERS.items() if mark[0] in line}
        pos = 0
        while (opener := _OPENER.search(line, pos)) is not None:
            pos = opener.start() + 1
            candidates = [opener.group(0)] + ([opener.group(0)[0]] if len(opener.group(0)) == 2 else [])
            for mark in candidates:
                starts = closers.get(mark, [])
                i = bisect_left(starts, opener.start() + len(mark) + 1)
                if i < len(starts):
                    end = starts[i] + len(mark)
                    spans.append(Emphasis(line_start + opener.start(), line_start + end, mark))
                    pos = end
                    break
        line_start += len(line) + 1
    return spans


def table_spans(text: str) -> list[Table]:
    """Each Markdown table in `text`: a line with a `|`, a delimiter line of as many cells, then rows."""
    tables: list[Table] = []
    lines = text.split("\n")
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    i = 0
    while i + 1 < len(lines):
        header, delimiter = lines[i], lines[i + 1]
        if "|" in header and "|" in delimiter and _TABLE_DELIMITER.match(delimiter) and _cells(header) == _cells(
            delimiter
        ):
            last = i + 2
            while last < len(lines) and lines[last].strip():
                last += 1
            if last > i + 2:
                tables.append(Table(offsets[i], offsets[i + 2], offsets[last] - 1, header + "\n" + delimiter + "\n"))
            i = last
        else:
            i += 1
    return tables


def _cells(line: str) -> int:
    return len(line.strip().strip("|").split("|"))
