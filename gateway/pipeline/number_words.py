"""Numbers an answer writes other than in digits, for gate 2's check of its values (`evidence`): an amount in
words ("sixty dollars" states 60 as surely as "$60" does), a number said to be approximate ("about 60
dollars" of a total of 59.90), and a whole ("100% paid", which is a manner of speaking, not a figure)."""

from __future__ import annotations

import re
from decimal import Decimal

_UNITS = {w: n for n, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen".split())}
_TENS = {w: n * 10 for n, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), start=2)}
_SCALES = {"hundred": 100, "thousand": 1000}
_NUMBER_WORD = "|".join(sorted([*_UNITS, *_TENS, *_SCALES, "a", "and"], key=len, reverse=True))
_WORDS = rf"(?:{_NUMBER_WORD})(?:[\s-]+(?:{_NUMBER_WORD}))*"
# Only before a currency or "percent": "one of the two items" states no amount, "sixty dollars" does; with
# its cents, one amount ("forty-two dollars and fifty cents" is 42.50).
IN_WORDS = re.compile(rf"\b({_WORDS})\s+(?:(cents?|pence)|dollars?|bucks|euros?|pounds?|francs?|(percent|per\s+cent))\b"
                       rf"(?:,?\s+(?:and\s+)?({_WORDS})\s+(?:cents?|pence)\b)?", re.IGNORECASE)
# "100%", "100 percent": the whole of something, as "fully" is.
WHOLE = re.compile(r"(?<![\d.,])100\s*(?:%|percent\b|per\s+cent\b)", re.IGNORECASE)
# A number these come just before is said to be near the true one, not to be it.
_APPROXIMATELY = re.compile(r"(?:\b(?:about|around|roughly|approximately|approx\.|almost|nearly|some|close\s+to"
                            r"|just\s+(?:under|over|below|above)|circa|ca\.|unos|unas|aproximadamente|casi|etwa"
                            r"|ungef[aä]hr|rund|environ|presque|cerca\s+de)|~|≈)\s*(?:[$€£]|US\$)?\s*$", re.IGNORECASE)
_APPROXIMATE_SHARE = Decimal("0.05")  # "about 60" of 59.90, of 57, of 63; not of 45


def amounts_in_words(text: str) -> list[tuple[int, Decimal]]:
    """(where it starts, its value) of each amount `text` writes in words: "sixty dollars", "forty-five
    euros", "one hundred and twenty dollars"."""
    found = []
    for match in IN_WORDS.finditer(text):
        value = _value_of(match.group(1))
        if value is not None:
            if match.group(3) and value == 100:
                continue  # "one hundred percent paid": a whole, as "100%" is
            cents = _value_of(match.group(4) or "") or 0
            amount = Decimal(value) / 100 if match.group(2) else Decimal(value) + Decimal(cents) / 100
            found.append((match.start(), amount))
    return found


def _value_of(written: str) -> int | None:
    """The number English words write, or None when they write none ("a", "and" alone)."""
    total = current = 0
    seen = False
    for word in re.split(r"[\s-]+", written.lower()):
        if word in _UNITS or word in _TENS:
            current += _UNITS.get(word, _TENS.get(word, 0))
            seen = True
        elif word in _SCALES:
            current = max(current, 1) * _SCALES[word]
            if _SCALES[word] >= 1000:
                total, current = total + current, 0
            seen = True
        elif word == "a":
            current = 1 if not current else current
    return total + current if seen else None


def approximate(text_before: str) -> bool:
    """Whether the words just before a number say it is near the true one ("about", "roughly", "~")."""
    return bool(_APPROXIMATELY.search(text_before[-40:]))


def near(value: Decimal, held: frozenset[Decimal]) -> bool:
    """Whether `value` is a round figure of a held one: within 5% of it ("about 60" of 59.90)."""
    return value > 0 and any(abs(other - value) <= _APPROXIMATE_SHARE * value for other in held if other > 0)
