"""Cutting one block that alone exceeds the token budget into pieces that each fit.

Cuts fall only at safe places: prose at sentence ends (then words), code at line ends with each
piece re-wrapped in its own complete fence, tables between rows with the header repeated. A list item or quote that holds a fence or a table is cut at its parts first (`rag.blocks`),
each then cut by its own kind. So no chunk ever holds half a code fence or half a table row. The word splitter is also the last resort
for chunking's heading paths, embed heads and sentences (`rag.chunking`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from rag.blocks import Block

_SENTENCE_END = re.compile(r"(?<=[.!?:;])\s+")


def split_block(block: Block, *, budget: int, size: Callable[[str], int]) -> list[str]:
    """Split one oversize block at safe places so every piece fits the budget."""
    if block.parts:  # a list item or quote holding a fence or table: cut between its parts first
        return [
            piece
            for part in block.parts
            for piece in ([part.text] if size(part.text) <= budget else split_block(part, budget=budget, size=size))
        ]
    if block.kind == "table":
        rows = block.text.splitlines()
        header = rows[:2] if len(rows) > 2 and set(rows[1].replace("|", "").strip()) <= set("-: ") else []
        body_rows = rows[len(header) :]
        return _greedy_lines(body_rows, budget=budget, size=size, head=header)
    if block.kind == "code":
        opening, closing = block.fence
        inner = block.text.splitlines()
        if opening:
            inner = inner[1:-1] if len(inner) > 1 and inner[-1].strip() == closing.strip() else inner[1:]
        return _greedy_lines(inner, budget=budget, size=size, head=[opening] if opening else [], tail=[closing] if closing else [])
    sentences = [s for s in _SENTENCE_END.split(block.text) if s.strip()]
    out: list[str] = []
    for sentence in sentences:
        out.extend([sentence] if size(sentence) <= budget else split_words(sentence, budget=budget, size=size))
    return merge(out, budget=budget, size=size, sep=" ")


def _greedy_lines(
    lines: list[str], *, budget: int, size: Callable[[str], int], head: list[str], tail: list[str] | None = None
) -> list[str]:
    """Pack lines into pieces of at most `budget`, each wrapped in `head`/`tail` lines."""
    tail = tail or []
    frame = size("\n".join(head + tail)) if head or tail else 0
    room = max(budget - frame, 1)
    fitted: list[str] = []
    for line in lines:
        fitted.extend([line] if size(line) <= room else split_words(line, budget=room, size=size))
    groups = merge(fitted, budget=room, size=size, sep="\n")
    return ["\n".join(head + [g] + tail) for g in groups]


def merge(parts: list[str], *, budget: int, size: Callable[[str], int], sep: str) -> list[str]:
    out: list[str] = []
    current: list[str] = []
    used = 0
    for part in parts:
        n = size(part)
        if current and used + n > budget:
            out.append(sep.join(current))
            current, used = [], 0
        current.append(part)
        used += n
    if current:
        out.append(sep.join(current))
    return out


def split_words(text: str, *, budget: int, size: Callable[[str], int]) -> list[str]:
    """Last resort for a run-on sentence or line: cut between words, then inside a long word.

    Each word is counted once and the counts are summed: a word-piece count is additive over
    whitespace-separated words (no piece spans a space). Counting the growing piece instead made
    this quadratic: 17 of 155 s of a STICI ingest. Each piece is still counted whole once, and a
    counter that is not additive gets the exact cut."""
    empty = size("")
    out: list[str] = []
    current: list[str] = []
    used = empty
    for word in text.split():
        if size(word) > budget:
            *pieces, word = _cut_word(word, budget=budget, size=size)
            if pieces and current:  # the words before go first, or the text would be reordered
                out.append(" ".join(current))
                current, used = [], empty
            out.extend(pieces)
        n = size(word) - empty
        if current and used + n > budget:
            out.append(" ".join(current))
            current, used = [], empty
        current.append(word)
        used += n
    if current:
        out.append(" ".join(current))
    fitted: list[str] = []
    for piece in out:
        fitted += [piece] if size(piece) <= budget else _split_words_exact(piece, budget=budget, size=size)
    return fitted


def _cut_word(word: str, *, budget: int, size: Callable[[str], int]) -> list[str]:
    """Cut one word longer than the budget into the longest pieces found that fit (at least one
    character each, even a character over budget).

    Each cut searches a window that starts at the last piece's length, never the rest of the word:
    re-counting the rest at every cut made a 107k-character data URI take 57 s."""
    pieces: list[str] = []
    start, guess = 0, max(budget, 1)
    while start < len(word):
        length = _longest_fit(word, start, guess=guess, budget=budget, size=size)
        pieces.append(word[start : start + length])
        start, guess = start + length, length + 1
    return pieces


def _longest_fit(word: str, start: int, *, guess: int, budget: int, size: Callable[[str], int]) -> int:
    """Length of the longest piece from `start` found to fit, counting only pieces near `guess` long."""
    rest = len(word) - start
    fits, fits_n, over = 0, 0, min(guess, rest)
    while (over_n := size(word[start : start + over])) <= budget:  # gallop until a piece does not fit
        if over == rest:
            return over
        fits, fits_n, over = over, over_n, min(over * 2, rest)
    for step in range(rest):
        if over - fits <= 1:
            break
        # Where the count should reach the budget (counts grow about evenly with length); every
        # other step halves instead, so an uneven count cannot stall the search.
        mid = fits + (over - fits) * (budget - fits_n) // max(over_n - fits_n, 1) if step % 2 == 0 else (fits + over) // 2
        mid = min(max(mid, fits + 1), over - 1)
        if (n := size(word[start : start + mid])) <= budget:
            fits, fits_n = mid, n
        else:
            over, over_n = mid, n
    return max(fits, 1)


def _split_words_exact(text: str, *, budget: int, size: Callable[[str], int]) -> list[str]:
    """`split_words` counting every candidate piece whole, for a counter that is not additive."""
    out: list[str] = []
    current: list[str] = []
    for word in text.split():
        if current and size(" ".join(current + [word])) > budget:
            out.append(" ".join(current))
            current = []
        current.append(word)
    if current:
        out.append(" ".join(current))
    return out
