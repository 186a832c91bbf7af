"""Splitting shared by every channel.

`split_text` cuts an answer into parts that each fit a platform's limit. It prefers, in order, paragraph,
line, sentence and word boundaries, and never cuts inside a fenced code block or a URL (nor a Markdown link,
nor a link in angle brackets such as Slack's `<url|label>`, nor an inline code span, nor a bold or italic run
within a paragraph) unless that span alone is longer than the limit. A code block longer than the limit is cut
between its lines, and each part closes and reopens the fence so it still renders as code (fences are found as
CommonMark reads them: one indented in a list item or in a block quote too, never inline code); a bold or italic run, an inline
code span or a link's label longer than the limit is closed and reopened the same way (`[…` + `](url)`, nested
ones inner first; one with no space in a part's reach, a token or a path, is cut where the part is full, not
also before it), and a Markdown table cut between its rows starts each later part with its header and
`|---|` lines again, so it is still a table. Only the whitespace at a cut is dropped, and those added marks
and headers.

Platform dialects (Telegram HTML, Slack mrkdwn, WhatsApp plain text...) live in each channel's module, and the
citation footers in channels/citations.py; this module knows nothing about any one platform.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import accumulate
from typing import Literal

from markdown_it import MarkdownIt

from channels.split_spans import BLOCK_START, Table, Wrapped, cluster_cut, code_spans, emphasis_spans, table_spans

Unit = Literal["chars", "utf16"]

_PARAGRAPH = re.compile(r"[^\S\n]*\n(?:[^\S\n]*\n)+")
_LINE = re.compile(r"[^\S\n]*\n")
# Latin sentence ends need following space; CJK full stops are followed by no space at all. Arabic and
# Urdu end theirs with "؟" and "۔", Hindi with "।" (or "॥"), followed by a space as in Latin text: without
# them a long Arabic or Hindi answer was cut mid-sentence. The cut is group 1 or 2, so closing quotes stay
# with their sentence.
_SENTENCE = re.compile(r"[.!?…؟۔।॥][\"'”’»)\]]*([^\S\n]+)|[。！？]()(?=\S)")
_WORD = re.compile(r"[^\S\n]+")
_LEVELS = (_PARAGRAPH, _LINE, _SENTENCE, _WORD)
_LINE_LEVEL = 1  # paragraph and line cuts are the only ones allowed inside a code block

_URL = re.compile(r"(?:https?|ftp|mailto|tel):[^\s<>\"`]+|www\.[^\s<>\"`]+", re.IGNORECASE)
# No "[" in the label: with one allowed, each "[" of a run of them searched the rest of its line for
# "](", and a 13,000-character line of "[" took 0.6 s to split, 130,000 a minute, on the event loop. The label
# may go on over a line break (CommonMark's soft break), not past its paragraph: a blank line, or a line that
# starts a block of its own (`split_spans.BLOCK_START`).
_MD_LINK = re.compile(r"!?\[[^\[\]\n]*(?:\n(?![^\S\n]*\n|" + BLOCK_START.pattern + r")[^\[\]\n]*)*"
                      r"\]\([^()\s]*(?:\([^()\s]*\)[^()\s]*)*\)")
# A link in angle brackets: Slack's `<url|label>` (its label may hold spaces and sentence ends) and
# Markdown's `<url>`. Cut at a space in the label, Slack showed both halves as raw text.
_ANGLE_LINK = re.compile(r"<(?:https?|ftp|mailto|tel):[^<>\n]*>", re.IGNORECASE)
_NEWLINE = re.compile(r"\n")
_SPACE = re.compile(r"\s")
# Only to find fenced code blocks, which are block structure: the inline pass (links, emphasis, code
# spans) would cost most of the parse, and on an answer full of "[" or "*_" 10 µs a character, on the
# event loop of every channel's send (bench.splitter).
_MD = MarkdownIt("commonmark", {"html": False}).disable(["inline", "text_join"])


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units, the unit Telegram counts its limits in."""
    return len(text.encode("utf-16-le")) // 2


def text_length(text: str, *, unit: Unit = "chars") -> int:
    """Length of `text` in the given unit."""
    return utf16_len(text) if unit == "utf16" else len(text)


@dataclass(frozen=True, slots=True)
class _Fence:
    start: int  # start of the opening line
    open_end: int  # index of the newline that ends the opening line
    close_start: int  # start of the closing line (the end of its last line when unclosed)
    end: int  # end of the closing line
    opener: str  # the opening line as written, e.g. "```python"
    closer: str  # the marker that closes it, indented as the opener, e.g. "```"


def _find_fences(text: str) -> list[_Fence]:
    """The fenced code blocks as CommonMark reads them. Why a parser: a fence indented in a list item
    ("1. Install:" then "    ```bash") went unseen, so a part ended inside it unclosed and the next part
    showed the rest of the code as text; a line that only starts with inline code (```a``` b) is none."""
    starts = [0, *(m.end() for m in _NEWLINE.finditer(text))]

    def line_end(line: int) -> int:
        return starts[line + 1] - 1 if line + 1 < len(starts) else len(text)

    fences: list[_Fence] = []
    for tok in _MD.parse(text):
        if tok.type != "fence" or not tok.map:
            continue
        first, last = tok.map[0], min(tok.map[1], len(starts)) - 1
        opener = text[starts[first]:line_end(first)]
        prefix = opener[: max(opener.find(tok.markup), 0)]
        if not opener.startswith(prefix + tok.markup) or prefix.strip(" >"):
            continue  # on a list item's marker line ("- ```"): no closer or opener added here could carry it
        closing = text[starts[last]:line_end(last)].strip() if last > first else ""
        closing = closing.lstrip("> ") if ">" in prefix else closing  # a block quote's closing "> ```"
        closed = len(closing) >= len(tok.markup) and set(closing) == {tok.markup[0]}
        close_start = starts[last] if closed else line_end(last)
        # The closer keeps the opener's indent, which a fence in a list item needs to stay in it, and its
        # ">", which one in a block quote needs; the opener again at the top of the next part keeps the ">" only
        # (that part is out of the list item), and so do its closers there (`_Splitter.piece`).
        fences.append(_Fence(starts[first], line_end(first), close_start, line_end(last), opener.strip(),
                             prefix + tok.markup))
    return fences


def fence_open_at(text: str, pos: int) -> str | None:
    """The opening line (e.g. "```python") of the fenced code block that `text` is inside at `pos`,
    or None. A block still unclosed at the end of `text` counts up to and including its end."""
    for fence in _find_fences(text):
        unclosed = fence.close_start == fence.end
        if fence.open_end < pos and (pos < fence.close_start or (unclosed and pos <= fence.end)):
            return fence.opener
    return None


def _cut_span(match: re.Match[str]) -> tuple[int, int]:
    """The whitespace to drop at a cut: the matched group if the pattern has one, else the match."""
    for group in range(match.re.groups, 0, -1):
        if match.start(group) >= 0:
            return match.span(group)
    return match.span()


def _covered(spans: Iterable[tuple[int, int]], size: int) -> bytearray:
    """For each index of a text of `size`, 1 if a span covers it. Linear in the text for spans that overlap
    only a few deep (links and URLs, code spans, fences), and the filling is done in C."""
    marks = bytearray(size + 1)
    for start, end in spans:
        if end > start:
            marks[start:end] = b"\x01" * (end - start)
    return marks


class _Splitter:
    """One split of one text; holds the precomputed candidates and lengths."""

    def __init__(self, text: str, limit: int, unit: Unit) -> None:
        self.text = text
        self.limit = limit
        self.unit = unit
        sizes = [2 if ord(ch) > 0xFFFF else 1 for ch in text] if unit == "utf16" else [1] * len(text)
        self.cum = [0, *accumulate(sizes)]
        self.cuts = [[_cut_span(m) for m in rx.finditer(text)] for rx in _LEVELS]
        self.cut_ends = [[end for end, _ in level] for level in self.cuts]
        fences = _find_fences(text)
        overhead = max((self.measure(f.opener) + self.measure(f.closer) + 2 for f in fences), default=0)
        # A fence that fits in one part is never cut; one that doesn't is cut between lines.
        self.big_fences = [f for f in fences if self.span(f.start, f.end) > limit and overhead * 2 < limit]
        md_links = list(_MD_LINK.finditer(text))
        md_spans = [m.span() for m in md_links]
        starts = [start for start, _ in md_spans]

        def in_md_link(span: tuple[int, int]) -> tuple[int, int]:
            """A bare URL's match ends with the Markdown link it is in: in "**[a](https://x)**." its "**." too."""
            i = bisect_right(starts, span[0]) - 1
            return (span[0], min(span[1], md_spans[i][1])) if i >= 0 and span[0] < md_spans[i][1] else span

        links = md_spans + [m.span() for m in _ANGLE_LINK.finditer(text)] + [in_md_link(m.span()) for m in _URL.finditer(text)]
        # Emphasis, a code span or a link's label cut between its sentences showed its marks as typed in both
        # parts: one that fits is kept whole, a longer one (outside a code block) is closed at the cut and
        # reopened in the next part. A mark inside a URL ("/_a" … "b_/") or a code span is no emphasis.
        fenced = list(accumulate(_covered(((f.start, f.end) for f in fences), len(text)), initial=0))
        code = [c for c in code_spans(text) if fenced[c.end] == fenced[c.start]]  # none in a code block
        in_link, in_code = _covered(links, len(text)), _covered(((c.start, c.end) for c in code), len(text))
        wrapped = code + [e for e in emphasis_spans(text) if fenced[e.end] == fenced[e.start]
                          and not in_link[e.start] and not in_link[e.end - 1] and not in_code[e.start]
                          and not in_code[e.end - 1]]
        wrapped += [Wrapped(m.start(), m.end(), "[", m.group(0)[m.group(0).index("]"):]) for m in md_links
                    if m.group(0).startswith("[") and not in_code[m.start()]]
        self.big_wrapped = [w for w in wrapped if self.span(w.start, w.end) > limit
                            and (self.measure(w.opener) + self.measure(w.closer)) * 4 <= limit]
        links += [(w.start, w.end) for w in wrapped if w not in self.big_wrapped]
        self.protected = sorted(
            [(f.start, f.end) for f in fences if f not in self.big_fences]
            + [(s, e) for s, e in links if self.span(s, e) <= limit]
        )
        self.in_protected = _covered(((s + 1, e) for s, e in self.protected), len(text))  # strictly inside one
        # A table cut between rows lost its header, and the later part showed its rows as raw pipes.
        self.tables = [t for t in table_spans(text) if self.measure(t.head) * 4 <= limit
                       and not any(f.start < t.end and t.start < f.end for f in fences)]

    def measure(self, text: str) -> int:
        return text_length(text, unit=self.unit)

    def span(self, start: int, end: int) -> int:
        return self.cum[end] - self.cum[start]

    def furthest(self, start: int, budget: int) -> int:
        """The largest index `end` with span(start, end) <= budget."""
        return max(start, bisect_right(self.cum, self.cum[start] + budget) - 1)

    def fence_at(self, pos: int) -> _Fence | None:
        """The oversized fence whose body contains `pos`, if any."""
        for fence in self.big_fences:
            if fence.open_end < pos < fence.close_start:
                return fence
        return None

    def wrapped_at(self, pos: int) -> list[Wrapped]:
        """The oversized spans (emphasis, code, a link's label) whose text contains `pos`, outermost first."""
        return sorted((w for w in self.big_wrapped if w.inside(pos)), key=lambda w: (w.start, -w.end))

    def table_at(self, pos: int) -> Table | None:
        """The table whose rows contain `pos`, if any."""
        for table in self.tables:
            if table.body <= pos <= table.end:
                return table
        return None

    def allowed(self, end: int, nxt: int, level: int) -> bool:
        if self.in_protected[end]:
            return False
        for run in self.big_wrapped:  # never between a mark and its text
            if run.start < end <= run.start + len(run.opener) or run.end - len(run.closer) <= end < run.end:
                return False
            # Nor where the mark added would run into a like character: "`a`" + "``" reads "`a```", no closer.
            if (run.inside(end) and self.text[end - 1] == run.closer[0]) or (
                    run.inside(nxt) and self.text[nxt] == run.opener[-1]):
                return False
        for table in self.tables:  # whole rows only, after the header
            if table.start < end < table.end and not (table.body <= end and level <= _LINE_LEVEL):
                return False
        for fence in self.big_fences:
            if fence.start < end < fence.end:
                inside = fence.open_end < end and nxt < fence.close_start
                return inside and level <= _LINE_LEVEL
        return True

    def choose(self, start: int, hard: int, budget: int) -> tuple[int, int]:
        """The best cut (end, next) in (start, hard]: a high-level boundary unless it comes too early."""
        fallback: tuple[int, int] | None = None
        for level, (cuts, ends) in enumerate(zip(self.cuts, self.cut_ends)):
            i = bisect_right(ends, hard) - 1
            while i >= 0 and ends[i] > start:
                end, nxt = cuts[i]
                if nxt > start and self.allowed(end, nxt, level):
                    if self.span(start, end) * 2 >= budget:
                        return end, nxt
                    if fallback is None or end > fallback[0]:
                        fallback = (end, nxt)
                    break
                i -= 1
        if fallback is not None and not self.cut_in_run_anyway(fallback[1], hard, budget):
            return fallback
        # No boundary at all: cut hard, but before a protected span rather than inside it.
        for s, e in self.protected:
            if s < hard < e and s > start:
                return s, s
        for fence in self.big_fences:
            if fence.start < hard <= fence.open_end and fence.start > start:
                return fence.start, fence.start
        cut = cluster_cut(self.text, hard, start)  # not inside an emoji, a flag, an accented letter
        return cut, cut

    def cut_in_run_anyway(self, nxt: int, hard: int, budget: int) -> bool:
        """Whether `hard` is inside an oversized span (a code span) that starts after the boundary a part would
        end at (`nxt`, its next part's start) and holds no space within a part's reach: it is cut hard in any
        case, so cutting before it too only made one more part ("Set the key to" alone)."""
        return self.allowed(hard, hard, len(_LEVELS)) and any(
            nxt <= w.start and w.inside(hard) and not _SPACE.search(self.text, w.start, self.furthest(w.start, budget))
            for w in self.big_wrapped)

    def piece(self, start: int, end: int, reopened: _Fence | None) -> str:
        """text[start:end], right-stripped; in a part that reopened `reopened`, its closing line unindented, as the
        opener reopening it is. Why: out of its list item, a closer indented four spaces closes nothing, and the
        code block ran over the closer and the text after it."""
        body = self.text[start:end].rstrip()
        if reopened is not None and start <= reopened.close_start < start + len(body):
            cut = reopened.close_start - start
            body = body[:cut] + body[cut:].lstrip(" ")
        return body

    def run(self) -> list[str]:
        text, parts, start = self.text, [], 0
        prefix, open_fence = "", None
        while start < len(text):
            while start < len(text) and text[start] == "\n":
                start += 1
            rest = text[start:].rstrip()
            if not rest:
                break
            if self.measure(prefix) + self.span(start, start + len(rest)) <= self.limit:
                parts.append(prefix + self.piece(start, len(text), open_fence))
                break
            budget = self.limit - self.measure(prefix)
            hard = self.furthest(start, budget)
            closers = sum(self.measure(w.closer) + w.closer.startswith("`") for w in self.big_wrapped
                          if w.start < hard and w.end > start)  # and a space a code span's may need (`_marks`)
            if closers:
                budget -= closers  # room for the closing marks
                hard = self.furthest(start, budget)
            end = nxt = -1
            if any(f.start < hard and f.end > start for f in self.big_fences):
                # A cut after the fence's own closing line needs no closer added: try the whole budget
                # first. Reserving room for a closer first made a fence that ended just inside the
                # budget be cut in its closing line ("``" + "`").
                if hard > start:
                    end, nxt = self.choose(start, hard, budget)
                if any(f.start < end < f.end for f in self.big_fences):
                    end = nxt = -1
                if end < 0:
                    budget -= max(self.measure(f.closer) + 1 for f in self.big_fences)
                    hard = self.furthest(start, budget)
            if hard <= start:
                raise ValueError(f"limit {self.limit} is too small to make progress")
            if end < 0:
                end, nxt = self.choose(start, hard, budget)
            fence, runs, table = self.fence_at(end), self.wrapped_at(end), self.table_at(end)
            body = self.piece(start, end, open_fence)
            if body:
                closer = (fence.closer.lstrip(" ") if fence is open_fence else fence.closer) if fence else ""
                parts.append(prefix + body + (f"\n{closer}" if fence else _code_gap(runs, body[-1:]) + "".join(
                    r.closer for r in runs[::-1])))
            open_fence = fence if fence and self.fence_at(nxt) is fence else None
            if open_fence is not None:
                prefix = f"{fence.opener}\n"
            elif reopened := [r for r in runs if r.inside(nxt)]:
                prefix = "".join(r.opener for r in reopened) + _code_gap(reopened, text[nxt])
            elif table and table.body < nxt <= table.end and self.table_at(nxt) is table:
                prefix = table.head
            else:
                prefix = ""
            start = nxt
        return parts


def _code_gap(runs: list[Wrapped], beside: str) -> str:
    """A space between a code span's mark added at a cut (the innermost of `runs`) and a backtick `beside` it,
    which CommonMark drops: "`a`" + "``" read "`a```", a run of three that closes nothing."""
    return " " if runs and runs[-1].opener.startswith("`") and beside == "`" else ""


# A platform without an escape (Slack, WhatsApp) formats `*not bold*` however the answer escaped it:
# an escaped mark is sent as a look-alike that the platform never reads as one.
LITERAL_MARKS = {"*": "\u2217", "_": "\uff3f", "~": "\u223c", "`": "\u02cb"}


def fence_spans(text: str) -> list[tuple[int, int]]:
    """Where `text`'s fenced code blocks are, opening line to closing line, as CommonMark reads them."""
    return [(fence.start, fence.end) for fence in _find_fences(text)]


def outside(spans: re.Pattern[str] | Iterable[tuple[int, int]], text: str, convert: Callable[[str], str], *,
            inside: Callable[[str], str] | None = None) -> str:
    """`text` with `convert` applied between `spans` (a pattern's matches, or (start, end) pairs in order:
    code, which a dialect converter must leave as written); the spans pass through unchanged, or through
    `inside` (what a dialect's code blocks need)."""
    found = ((m.start(), m.end()) for m in spans.finditer(text)) if isinstance(spans, re.Pattern) else spans
    out, pos = [], 0
    for start, end in found:
        out.append(convert(text[pos:start]))
        out.append(inside(text[start:end]) if inside is not None else text[start:end])
        pos = end
    out.append(convert(text[pos:]))
    return "".join(out)


def split_text(text: str, *, limit: int, unit: Unit = "chars") -> list[str]:
    """Split `text` into parts of at most `limit` units (chars, or UTF-16 code units).

    Cuts on paragraph, then line, then sentence, then word boundaries; never inside a fenced code
    block or a URL unless that span alone exceeds the limit. Empty or blank text gives no parts.
    """
    if limit < 1:
        raise ValueError("limit must be positive")
    if not text.strip():
        return []
    if text_length(text, unit=unit) <= limit:
        return [text]
    return _Splitter(text, limit, unit).run()
