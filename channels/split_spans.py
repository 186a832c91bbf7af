"""Spans of an answer that `split_text` must not cut blindly: emphasis runs, code spans, links and tables.

Emphasis within a line is Markdown's `**bold**`, `*italic*`, `_italic_`, `~~strike~~` and Slack's and
WhatsApp's `*bold*`, `_italic_`, `~strike~`. A code span is a run of backticks up to the next run of as
many, within its paragraph (CommonMark's rule). A table is a header line, its `|---|---|` line and the rows
that follow up to a blank line. All are found in linear time (a line of stray asterisks or backticks
included), so any length is found. Emphasis, a code span and a link's label are `Wrapped`: a cut inside
one closes it and the next part reopens it. A cut with no boundary to take is moved back out of a character
drawn as one (`cluster_cut`): an emoji with its modifiers, a flag, a letter with its accents.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass

_OPENER = re.compile(r"(?<![\w*_~])(?:\*\*\*|___|\*\*|__|~~|[*_~])(?=\S)")  # "***": bold and italic at once
# A closer follows its text directly: not a space, nor its own mark ("**x**" holds no "*" run).
_CLOSERS = {
    mark: re.compile(rf"(?<![\s{re.escape(mark[0])}]){re.escape(mark)}(?![\w*_~])") for mark in ("***", "___", "**", "__", "~~", "*", "_", "~")
}
_BACKTICKS = re.compile(r"`+")
BLOCK_START = re.compile(r"[ \t]*(?:[-+*][ \t]|\d{1,9}[.)][ \t]|#{1,6}[ \t]|>|\||```|~~~)")
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_TABLE_DELIMITER = re.compile(r"^ {0,3}\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")


@dataclass(frozen=True, slots=True)
class Wrapped:
    """Text between an opening and a closing mark: `**…**`, `` `…` ``, a link's `[…](url)`."""

    start: int  # the opening mark
    end: int  # after the closing mark
    opener: str  # "**", "`", "["
    closer: str  # "**", "`", "](https://…)"

    def inside(self, pos: int) -> bool:
        """Whether `pos` is within the text, past the opener and before the closer."""
        return self.start + len(self.opener) < pos < self.end - len(self.closer)


@dataclass(frozen=True, slots=True)
class Table:
    start: int  # start of the header line
    body: int  # start of the first row (after the delimiter line's newline)
    end: int  # end of the last row
    head: str  # the header and delimiter lines, each ending in a newline


def emphasis_spans(text: str) -> list[Wrapped]:
    """Each emphasis run in `text`, first opener to its nearest closer of the same mark, across the lines of
    a paragraph (as Markdown reads `**a` and `b**` on two lines of one) but never past its end: a blank line,
    or a line that starts a list item, a heading, a quote or a table row."""
    spans: list[Wrapped] = []
    line_start = 0
    for line in _paragraphs(text):
        closers = {mark: [m.start() for m in rx.finditer(line)] for mark, rx in _CLOSERS.items() if mark[0] in line}
        pos = 0
        while (opener := _OPENER.search(line, pos)) is not None:
            pos = opener.start() + 1
            candidates = list(dict.fromkeys(opener.group(0)[:n] for n in (3, 2, 1) if n <= len(opener.group(0))))
            for mark in candidates:
                starts = closers.get(mark, [])
                i = bisect_left(starts, opener.start() + len(mark) + 1)
                if i < len(starts):
                    end = starts[i] + len(mark)
                    spans.append(Wrapped(line_start + opener.start(), line_start + end, mark, mark))
                    pos = end
                    break
        line_start += len(line) + 1
    return spans


def _paragraphs(text: str) -> list[str]:
    """`text` cut before each line that starts a block of its own (and at blank lines), each part's lines
    joined by their newlines: the parts, joined by newlines, are `text` again."""
    parts: list[list[str]] = []
    for line in text.split("\n"):
        if parts and line.strip() and parts[-1][-1].strip() and not BLOCK_START.match(line):
            parts[-1].append(line)
        else:
            parts.append([line])
    return ["\n".join(lines) for lines in parts]


def code_spans(text: str) -> list[Wrapped]:
    """Each inline code span: a run of backticks to the next run of the same length in its paragraph."""
    runs = [m.span() for m in _BACKTICKS.finditer(text)]
    by_length: dict[int, list[int]] = defaultdict(list)  # run length -> the starts of such runs, in order
    index = {}
    for i, (start, end) in enumerate(runs):
        by_length[end - start].append(start)
        index[start] = i
    breaks = [m.start() for m in _BLANK_LINE.finditer(text)] + [len(text)]
    spans: list[Wrapped] = []
    i = 0
    while i < len(runs):
        start, end = runs[i]
        same = by_length[end - start]
        j = bisect_left(same, end)
        if j < len(same) and same[j] < breaks[bisect_left(breaks, start)]:
            mark = text[start:end]
            spans.append(Wrapped(start, same[j] + len(mark), mark, mark))
            i = index[same[j]] + 1
        else:
            i += 1
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


# What attaches to the character before it: a ZWJ, a variation selector, a skin tone, a keycap, a tag (a
# subdivision flag's letters); combining marks are found by their Unicode category.
_ATTACHED = re.compile("[\u200d\ufe00-\ufe0f\u20e3\U0001f3fb-\U0001f3ff\U000e0020-\U000e007f]")
_REGIONAL = re.compile("[\U0001f1e6-\U0001f1ff]")


def _inside_cluster(text: str, pos: int) -> bool:
    """Whether a cut before `text[pos]` splits what is drawn as one character."""
    after, before = text[pos], text[pos - 1]
    if _ATTACHED.match(after) or unicodedata.category(after) in ("Mn", "Me", "Mc") or before == "\u200d":
        return True
    if _REGIONAL.match(after) and _REGIONAL.match(before):
        run = pos
        while run > 0 and _REGIONAL.match(text[run - 1]):
            run -= 1
        return (pos - run) % 2 == 1  # flags pair from the first indicator on: an odd count leaves one alone
    return False


def cluster_cut(text: str, pos: int, floor: int) -> int:
    """`pos`, moved back to the nearest cut after `floor` that splits no character drawn as one; `pos` when
    there is none (one cluster longer than a part is cut anyway)."""
    cut = pos
    while floor < cut < len(text) and _inside_cluster(text, cut):
        cut -= 1
    return cut if cut > floor else pos
