"""An answer's sentences, for gate 2's checks that keep some and drop others.

A sentence ends at `.`, `!` or `?` followed by whitespace (not after a list number, an abbreviation
such as "e.g." or "Nov.", or a day's ordinal dot before a month's name, "am 28. November"; and a number
after an abbreviation ends its sentence: "on Nov. 28."), at Arabic `؟`, Urdu `۔` or Hindi `।` followed by
whitespace, at a Chinese or Japanese
`。`, `！` or `？` (no space follows those), or at a line break. What separates two
sentences is kept as it was, so an answer's list and paragraphs keep their line breaks when a
sentence of theirs goes: joining the kept sentences with spaces turned "1. Open Settings [1].\n2. Tap
Reset." into one line.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from gateway.pipeline.month_names import FULL_MONTH

# `(?<![ \t])`: a line break's match starts where its run of spaces does, so a long run costs linear time.
# A CJK stop's boundary is empty, found once the next character (not a closing quote) has come. Without
# these, a Chinese or Hindi answer was one sentence: an unknown link in it cost the whole answer.
BOUNDARY = re.compile(r"((?<=[.!?؟۔।॥])\s+|(?<![ \t])[ \t]*\n\s*|(?:(?<=[。！？])|(?<=[。！？][”’」』）]))(?=[^\s”’」』）。！？]))")
# "1." at the start of a list item ends in a full stop but begins the item's sentence.
_LIST_NUMBER = re.compile(r"\d{1,3}[.)]")
# Months too: "It arrives on Nov. 28." lost its "28." as a sentence of its own, which holds no word.
_ABBREVIATIONS = (r"(?<![\w.])(?:e\.g|i\.e|etc|vs|mr|mrs|ms|dr|st|no|nr|approx|incl|fig|cf"
                  r"|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec)\.")
# "i.e. Mr. Smith" is one sentence: split there, dropping "Smith, at https://…" left "…our agent, i.e. Mr." behind.
_ABBREVIATION_END = re.compile(_ABBREVIATIONS + "$", re.IGNORECASE)
# A day's ordinal dot: German writes "am 28. November", where the dot ends no sentence.
_ORDINAL_DAY = re.compile(r"(?:^|(?<=\s))(?:[1-9]|[12]\d|3[01])\.$")
NOT_AN_END_BEFORE = re.compile(r"(?:^|(?<=\s))\d{1,3}[.)]$|" + _ABBREVIATIONS + "$", re.IGNORECASE | re.MULTILINE)
"""A list number or an abbreviation ending just where it is searched up to (`endpos`): the streaming
side's test, which takes every number after a space for a list number, so it never cuts where
`split_sentences` would not."""


def split_sentences(text: str) -> list[tuple[str, str]]:
    """`text` as (sentence, the whitespace after it) pairs; joined back they give `text` again."""
    parts = BOUNDARY.split(text)
    pairs: list[tuple[str, str]] = []
    pending = ""  # a list number waiting for the sentence it starts
    for i in range(0, len(parts), 2):
        sentence, after = parts[i], parts[i + 1] if i + 1 < len(parts) else ""
        # A number after an abbreviation ends its sentence ("on Nov. 28."); elsewhere it starts a list item.
        following = parts[i + 2] if i + 2 < len(parts) else ""
        if after and "\n" not in after and ((_LIST_NUMBER.fullmatch(sentence) and not pending)
                                           or _ABBREVIATION_END.search(sentence)
                                           or (_ORDINAL_DAY.search(sentence) and FULL_MONTH.match(following))):
            pending += sentence + after
            continue
        pairs.append((pending + sentence, after))
        pending = ""
    if pending:
        pairs.append((pending.rstrip(), ""))
    return pairs


def keep_sentences(text: str, keep: Callable[[str], bool]) -> str:
    """`text` with only the sentences `keep` accepts, each followed by the whitespace it had."""
    kept: list[list[str]] = []
    for sentence, after in split_sentences(text.strip()):
        if keep(sentence):
            kept.append([sentence, after])
        elif kept and after.count("\n") > kept[-1][1].count("\n"):
            kept[-1][1] = after  # "B. C.\n\nD." without C keeps the paragraph break before D
    return "".join(sentence + after for sentence, after in kept).strip()


# A sentence's end, then what may close it: quotes, brackets and citation markers ("… in Settings [1].").
_WHOLE_END = re.compile(r"[.!?؟۔।॥。！？…][\"'”’」』）)\]]*(?:\s*\[[\d,\s]+\][.\"'”’)]*)*$")


def whole_sentences(text: str) -> str:
    """`text` without its last sentence when that one does not end: what is left of an answer the model
    was stopped in the middle of."""
    pairs = split_sentences(text.strip())
    if pairs and not _WHOLE_END.search(pairs[-1][0]):
        pairs = pairs[:-1]
    return "".join(sentence + after for sentence, after in pairs).strip()
