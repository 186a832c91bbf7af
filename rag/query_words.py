"""How a query's words are read as literals: the words a user copied from the product, not wrote.

- `literal_words`: a digit, inner punctuation, or a capital letter anywhere but the first word (plan
  names, error codes, product and menu names). Gate 1's keyword override trusts a rare one of these.
- `identifier_words`: the stricter part of those that names one thing: a digit or inner punctuation
  (`E-SYNC-409`, `2fa`, `mo.ui.text`), or at least `IDENTIFIER_MIN_CAPITALS` capitals (`NFC`, `HDMI`).
  A section whose own heading holds one is the section about it (`rag.search`'s named-section prior).
  A capitalised word alone (`Team`, `Plus`, `Europe`) is too often an ordinary word, and two capitals
  (`US`, `TV`, `PC`) too often a word the whole manual repeats.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[^\s?!,;:()\"']+")
_INNER_PUNCTUATION = ".-_/"
IDENTIFIER_MIN_CAPITALS = 3


def literal_words(query: str) -> list[str]:
    """The query's literal-looking words, stripped of outer dots, dashes, underscores and slashes."""
    out: list[str] = []
    for position, word in enumerate(_WORD.findall(query)):
        inner = word.strip(_INNER_PUNCTUATION)
        if _has_digit_or_inner_punctuation(inner) or (position and word[:1].isupper()) or (
            any(ch.isupper() for ch in word[1:])
        ):
            out.append(inner)
    return out


def identifier_words(query: str) -> list[str]:
    """The query's literal words that name one thing: a code, a version, an acronym."""
    return [word for word in literal_words(query)
            if _has_digit_or_inner_punctuation(word) or sum(ch.isupper() for ch in word) >= IDENTIFIER_MIN_CAPITALS]


def word_parts(word: str) -> list[str]:
    """The parts of a word between its inner punctuation (`E-SYNC-409` → E, SYNC, 409)."""
    return [part for part in _PARTS.split(word) if part]


_PARTS = re.compile(f"[{re.escape(_INNER_PUNCTUATION)}]+")


def _has_digit_or_inner_punctuation(word: str) -> bool:
    return any(ch.isdigit() for ch in word) or any(ch in _INNER_PUNCTUATION for ch in word)
