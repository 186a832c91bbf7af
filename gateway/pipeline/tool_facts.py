"""Gate 2's check of an answer against the tools' data: a sentence that contradicts what a tool returned
is an unsupported claim, whether or not it cites an extract.

Two kinds of contradiction are caught, the clear ones only:

- **A state said to be otherwise.** A tool's status value (`"status": "shipped"`) negated ("it has not
  shipped yet"), a true flag (`"refundable": true`) negated, a false one (`"paid": false`) or a
  negative status (`"unpaid"`) stated as so ("it has been paid"). A state that differs between the
  results' records (two orders, one shipped) is nobody's to contradict, and a hedged or conditional
  sentence ("if it hasn't shipped by Friday…", "I can't tell whether it has shipped") states nothing.
- **A value the evidence does not hold.** With tool data in the answer's reach, every number, date
  and identifier it states must be in the extracts, the tool results, the call's arguments, the
  question or the bot's own texts: "$69.90" for a total of 59.90, "November 26" for `2026-11-28`,
  "A-1043" for order A-1042 are claims from nowhere.

An uncited answer resting on the tools keeps only the sentences that say what they returned
(`grounded_sentences`). A tool's text fields are data: their words ground an answer's words, but a
sentence planted in one (`"note": "the order has NOT shipped"`) is no state to hold an answer to.

Not caught: a state said to be another one ("pending" for "shipped"), since a tool's statuses are not
listed anywhere, so an answer's word cannot be told for a status rather than a word of its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from gateway.pipeline.sentences import keep_sentences

_MAX_DEPTH = 64  # a result nested thousands deep is walked this far, not until RecursionError
_STATE_VALUE = re.compile(r"[A-Za-z][A-Za-z _-]{3,30}")
# A string is a state only under a key that names one (`status`, `order_status`, `subscriptionState`): a
# text field ("note": "not shipped", planted or not) is data, never a state an answer is held to.
_STATE_KEY = frozenset({"status", "state", "stage", "phase", "condition", "availability", "plan", "tier", "standing"})
_NO_STATE = frozenset({"none", "null", "true", "false", "unknown", "n/a"})
_STATE_WORDS = 3  # a longer text is prose, not a state
_KEY_PREFIXES = frozenset({"is", "has", "was", "are", "can", "did", "have"})
# Keys about the lookup itself, not about the thing looked up.
_LOOKUP_KEYS = frozenset({"found", "ok", "success", "error", "valid", "exists", "truncated"})
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_NEGATIONS = frozenset({"not", "never", "nor", "non", "isn't", "hasn't", "wasn't", "haven't", "aren't",
                        "weren't", "doesn't", "didn't", "hadn't"})
# A state's word with one of these is its opposite: "unpaid", "inactive", "nonrefundable".
_NEGATIVE_PREFIXES = ("un", "in", "non")
_COPULAS = frozenset({"is", "are", "was", "were", "it's", "has", "have", "had", "got"})
# Words between a negation or a copula and the state it speaks of ("has not yet been shipped").
_BRIDGE = frozenset({"yet", "be", "been", "being", "already", "now", "fully", "actually", "even", "really", "currently",
                     "still", "just"})
# A sentence holding one of these before the state asks, doubts or supposes: it states nothing.
_HEDGES = frozenset({"if", "unless", "when", "once", "until", "whether", "before", "after", "sure", "know", "think",
                     "see", "tell", "find", "check", "confirm", "able", "can", "could", "may", "might", "should",
                     "would", "will", "seems", "appears", "ask", "asked", "wonder",
                     # as their positive forms: "we can't open a second ticket" is an action, not the ticket's state
                     "can't", "cannot", "couldn't", "shouldn't", "won't", "wouldn't"})
_MARKER = re.compile(r"\[\s*\d{1,4}(?:\s*,\s*\d{1,4})*\s*\]")
_LIST_NUMBER = re.compile(r"^\s*\d{1,3}[.)]\s+")
_NUMBER = re.compile(r"\d+")
# A number as written, with its thousands or decimal separators: "59.90", "1,200", "59,90".
_AMOUNT = re.compile(r"\d+(?:[.,]\d+)*")
_ACRONYM = re.compile(r"\b\d+[A-Z]{2,}\b")  # 2FA, 3DS: names, not numbers
_MONTHS = {name: n for n, names in enumerate(
    [("jan", "january"), ("feb", "february"), ("mar", "march"), ("apr", "april"), ("may",), ("jun", "june"),
     ("jul", "july"), ("aug", "august"), ("sep", "sept", "september"), ("oct", "october"), ("nov", "november"),
     ("dec", "december")], start=1) for name in names}
_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})")
_MONTH_DAY = re.compile(rf"\b({_MONTH})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s+(\d{{4}}))?", re.IGNORECASE)
_DAY_MONTH = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH})\b\.?(?:,?\s+(\d{{4}}))?", re.IGNORECASE)
# 12/07/2026, 07.12.2026, 2026/12/07, 28/11/26: day and month in either order (a dotted one has a 4-digit year,
# so a version such as 1.2.10 is none).
_NUMERIC_DATE = re.compile(r"(?<![\d.,/])(?:(\d{4})([/.])(\d{1,2})\2(\d{1,2})|(\d{1,2})/(\d{1,2})/(\d{4}|\d{2})"
                           r"|(\d{1,2})\.(\d{1,2})\.(\d{4}))(?![\d/]|[.,]\d)")
# 9:00, 17:30, 9am, 5 p.m., 9:30 PM: an hour, not two numbers.
_TIME = re.compile(r"(?<![\d:.,])(\d{1,2})(?::(\d{2}))?\s?([ap])\.?m\b\.?|(?<![\d:.,])(\d{1,2}):(\d{2})(?![\d:])",
                   re.IGNORECASE)
# A phone or account number however grouped: +1 (555) 010-2000, 555.010.2000, +15550102000.
_PHONE = re.compile(r"(?<![\w.,+])\+?\(?\d[\d ().-]{5,}\d(?!\w|[.,]\d)")
_PHONE_DIGITS = 7
_MAX_OPERANDS = 24
# Counts in words an answer may multiply by; "one" is left out (one plus any price is a new price).
_COUNT_WORDS = {w: n for n, w in enumerate(
    "two three four five six seven eight nine ten eleven twelve".split(), start=2)}
_TOKEN = re.compile(r"(?<![\w-])[A-Za-z0-9]+(?:[-_][A-Za-z0-9]+)*")
_UNIT = re.compile(r"\d+[a-z]{1,3}|[a-z]{1,2}\d{1,2}", re.IGNORECASE)  # 2FA, 24h, 10am, v2, Q4: no identifiers


@dataclass(frozen=True, slots=True)
class ToolFacts:
    """The states the tool results give: each key's values (a status) and each flag's truth; and how
    many items their lists hold ("you have 2 open orders" counts what a tool returned)."""

    states: dict[str, frozenset[str]] = field(default_factory=dict)
    flags: dict[str, frozenset[bool]] = field(default_factory=dict)
    counts: frozenset[int] = frozenset()

    @classmethod
    def of(cls, results: Sequence[Any]) -> ToolFacts:
        """Read `results` (objects, lists, or texts that are JSON) to any depth up to `_MAX_DEPTH`."""
        states: dict[str, set[str]] = {}
        flags: dict[str, set[bool]] = {}
        counts: set[int] = set()
        pending: list[tuple[str, Any, int]] = [("", r, 0) for r in results]
        while pending:
            key, item, depth = pending.pop()
            if depth > _MAX_DEPTH:
                continue
            if isinstance(item, str) and item.strip()[:1] in "[{":
                try:
                    item = json.loads(item)
                except (ValueError, RecursionError):
                    continue
            if isinstance(item, dict):
                pending.extend((str(k), v, depth + 1) for k, v in item.items())
            elif isinstance(item, (list, tuple)):
                counts.add(len(item))
                pending.extend((key, v, depth + 1) for v in item)
            elif isinstance(item, bool) and (phrase := _key_phrase(key)):
                flags.setdefault(phrase, set()).add(item)
            elif isinstance(item, str) and _STATE_KEY.intersection(_phrase(key).split()) \
                    and _STATE_VALUE.fullmatch(item.strip()) and len(item.split()) <= _STATE_WORDS \
                    and _phrase(item) not in _NO_STATE:
                states.setdefault(key.lower(), set()).add(_phrase(item))

        return cls({k: frozenset(v) for k, v in states.items()}, {k: frozenset(v) for k, v in flags.items()},
                   frozenset(counts))

    def contradiction(self, sentence: str) -> str | None:
        """What `sentence` says against the tools' states, named without their values (logs hold no
        customer data), or None."""
        words = _WORD.findall(_MARKER.sub(" ", sentence).lower().replace("\u2019", "'"))
        for key, values in self.states.items():
            if len(values) != 1:
                continue  # records that differ (one order shipped, one not): no single state to hold to
            (value,) = values
            if _stated(words, value) is False:
                return f"a tool's {key} said not to be so"
            positive = _positive_of(value)
            if positive and _stated(words, positive) is True:
                return f"a tool's {key} said to be the opposite"
        for phrase, truths in self.flags.items():
            if len(truths) != 1:
                continue
            (truth,) = truths
            stated = _stated(words, phrase)
            if stated is not None and stated is not truth:
                return f"a tool's {phrase!r} flag said to be the opposite"
        return None


def _phrase(text: str) -> str:
    """A value or key as the words an answer would write: `in_transit` → "in transit"."""
    spaced = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", text.strip())
    return " ".join(re.split(r"[\s_-]+", spaced.lower())).strip()


def _key_phrase(key: str) -> str:
    """A flag's key as words, without an `is_`/`has_` prefix (`is_paid` → "paid"); "" for a lookup's own
    keys (`found`), which say nothing of the thing looked up."""
    words = _phrase(key).split()
    while words and words[0] in _KEY_PREFIXES:
        words = words[1:]
    phrase = " ".join(words)
    return "" if not phrase or phrase in _LOOKUP_KEYS else phrase


def _positive_of(value: str) -> str:
    """The state a negative value denies: "unpaid" → "paid", "not shipped" → "shipped"; else ""."""
    if value.startswith("not "):
        return value[4:]
    if value.startswith("un") and len(value) >= 6 and " " not in value:
        return value[2:]
    return ""


def _stated(words: list[str], phrase: str) -> bool | None:
    """Whether the sentence's `words` state `phrase` as so (True: "has been paid"), as not so (False: "has
    not shipped yet", "is yet to be shipped", "no longer active", "never got shipped", "is unpaid"), or
    neither (None: not there, only mentioned, or hedged). A negation reaches the phrase only across words
    like "yet", "been" and adverbs ("not successfully shipped"): in "not pending, it's shipped" it is
    pending's, not shipped's."""
    target = phrase.split()
    opposites = {prefix + target[0] for prefix in _NEGATIVE_PREFIXES} if len(target) == 1 else set()
    hedge = next((i for i, w in enumerate(words) if w in _HEDGES), len(words))
    said: bool | None = None
    for i in range(len(words) - len(target) + 1):
        opposite = words[i] in opposites
        if words[i:i + len(target)] != target and not opposite:
            continue
        if i > hedge:
            return None
        j = i - 1
        while j >= 0 and (words[j] in _BRIDGE or (words[j].endswith("ly") and words[j] != "only")):
            j -= 1
        if j < 0:
            continue
        word, previous = words[j], words[j - 1] if j > 0 else ""
        if word in _NEGATIONS or (word, previous) in (("longer", "no"), ("to", "yet")):
            so = False
        elif word in _COPULAS:
            so = previous not in _NEGATIONS  # "never got shipped", "not was"
        else:
            continue
        if so is not opposite:
            said = True if said is None else said
        else:
            said = False
    return said


@dataclass(frozen=True, slots=True)
class Evidence:
    """The numbers, dates and identifiers of everything an answer may rest on, to look a sentence's up in."""

    numbers: frozenset[Decimal]
    dates: tuple[Date, ...]
    squashed: str
    times: frozenset[tuple[int, int]] = frozenset()
    phones: frozenset[str] = frozenset()  # the digits of each phone-like number

    @classmethod
    def of(cls, text: str, *, counts: frozenset[int] = frozenset()) -> Evidence:
        """Read once per answer: the extracts, the tool results and arguments, the question, the bot's texts,
        with the `counts` of the results' lists."""
        numbers = {Decimal(n) for n in _NUMBER.findall(text)}.union(*map(_readings, _AMOUNT.findall(text)))
        numbers |= {Decimal(n) for n in counts}
        return cls(frozenset(numbers), tuple(date for readings in _dates(text) for date in readings), _squashed(text),
                   frozenset(t for match in _TIME.finditer(text) for t in _time_readings(match)),
                   frozenset(d for match in _PHONE.finditer(text) if len(d := _digits(match.group(0))) >= _PHONE_DIGITS))

    def holds_date(self, readings: list[Date]) -> bool:
        """Whether one of a written date's `readings` is a date of the evidence."""
        return any(_same_date(date, other) for date in readings for other in self.dates)

    def unsupported(self, sentence: str) -> str | None:
        """A number, date or identifier `sentence` states that the evidence does not hold, or None."""
        plain = _LIST_NUMBER.sub("", _MARKER.sub(" ", sentence))
        for readings in _dates(plain):
            if not self.holds_date(readings):
                return "a date no extract or tool result holds"
        for token in _TOKEN.findall(plain):
            if _is_identifier(token) and _squashed(token) not in self.squashed:
                return "an identifier no extract or tool result holds"
        return "a number no extract or tool result holds" if self.lacks_a_number_of(plain) else None

    def lacks_a_number_of(self, sentence: str) -> bool:
        """Whether `sentence` states a number the evidence does not hold, however written ("$59.90" is
        the 59.9 of a tool's JSON, "59,90 €" too)."""
        plain = _LIST_NUMBER.sub("", _MARKER.sub(" ", sentence))
        # A date written in numbers that the evidence holds is one value, not three ("28/11/26": no 26 needed).
        plain = _NUMERIC_DATE.sub(lambda m: " " if self.holds_date(_numeric_readings(m)) else m.group(0), plain)
        # So is an hour ("17:00" for the evidence's "5pm") and a phone number grouped another way; one the
        # evidence does not hold is read as its numbers, as before.
        plain = _TIME.sub(lambda m: " " if self._holds_time(m) else m.group(0), plain)
        plain = _PHONE.sub(lambda m: " " if self._holds_phone(m.group(0)) else m.group(0), plain)
        stated = [_readings(n) for n in _AMOUNT.findall(_ACRONYM.sub(" ", plain))]
        held = [values & self.numbers for values in stated]
        # Operands: the held values, and small counts in words ("two mugs at $10 each").
        operands = [v for v in held if v] + [{Decimal(n)} for w in _WORD.findall(plain.lower())
                                             if (n := _COUNT_WORDS.get(w))]
        missing = [stated[i] for i, values in enumerate(held) if not values]
        if not missing:
            return False
        derived = _worked_out(operands)
        return any(not values & derived for values in missing)


    def _holds_time(self, match: re.Match[str]) -> bool:
        """Whether the evidence holds the hour `match` writes: as an hour, or (an hour on the hour) its number."""
        if self.times & set(_time_readings(match)):
            return True
        hour, minutes = match.group(1) or match.group(4), match.group(2) or match.group(5) or "0"
        return Decimal(hour) in self.numbers and (int(minutes) == 0 or Decimal(minutes) in self.numbers)

    def _holds_phone(self, written: str) -> bool:
        """Whether the evidence holds this phone number, grouped any way, with or without its country code."""
        digits = _digits(written)
        return len(digits) >= _PHONE_DIGITS and any(
            phone.endswith(digits) or digits.endswith(phone) for phone in self.phones)


def _worked_out(operands: list[set[Decimal]]) -> set[Decimal]:
    """The sums, differences and products of two of a sentence's own values (2 × $10 = $20; $59.90 - $39.90
    = $20): a line total or a balance worked out in front of the customer. Only its own sentence's: any two
    numbers of all the evidence would make almost any number. Its first `_MAX_OPERANDS` values: a table of
    thousands of numbers costs no more than a sentence."""
    values = [v for one in operands[:_MAX_OPERANDS] for v in one]
    return {r for i, a in enumerate(values) for b in values[i + 1:] for r in (a + b, abs(a - b), a * b)}


def _digits(text: str) -> str:
    return re.sub(r"\D", "", text)


def _time_readings(match: re.Match[str]) -> list[tuple[int, int]]:
    """(hour 0-23, minutes) of a `_TIME` match: 5pm is 17:00; "5:00" alone may be 5:00 or 17:00."""
    if match.group(1):
        hour, minutes = int(match.group(1)), int(match.group(2) or 0)
        if not 1 <= hour <= 12 or minutes > 59:
            return []
        return [(hour % 12 + (12 if match.group(3).lower() == "p" else 0), minutes)]
    hour, minutes = int(match.group(4)), int(match.group(5))
    if hour > 23 or minutes > 59:
        return []
    return [(hour, minutes), (hour + 12, minutes)] if 1 <= hour < 12 else [(hour, minutes)]


def _readings(number: str) -> set[Decimal]:
    """What a written number may be: "59.90" is 59.9; "1,200" is 1200 or 1.2 (a decimal comma); "59" is 59."""
    if "," in number and "." in number:
        return {Decimal(number.replace(",", ""))} if number.rfind(".") > number.rfind(",") else \
            {Decimal(number.replace(".", "").replace(",", "."))}
    if "," in number:
        readings = {Decimal(number.replace(",", ""))}
        return readings | {Decimal(number.replace(",", "."))} if number.count(",") == 1 else readings
    if number.count(".") > 1:  # a version or a dotted date: each part is a number of its own
        return {Decimal(part) for part in number.split(".")}
    return {Decimal(number)}


def _squashed(text: str) -> str:
    """Letters and digits only, lower case: "INV-2025-004217" and "inv 2025 004217" are one identifier."""
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _is_identifier(token: str) -> bool:
    """An order number, a tracking code, an invoice id: letters and digits in one part (ORD123,
    1Z999AA1) or an upper-case part with a number (A-1042, INV-2025-004217). Not "30-day", "2FA", "24h"."""
    if not any(c.isdigit() for c in token) or not any(c.isalpha() for c in token) or _UNIT.fullmatch(token):
        return False
    parts = re.split(r"[-_]", token)
    mixed = any(any(c.isdigit() for c in p) and any(c.isalpha() for c in p) for p in parts)
    return (mixed and len(token) >= 5) or (any(p.isalpha() and p.isupper() for p in parts)
                                           and any(p.isdigit() for p in parts))


Date = tuple[int | None, int, int]
"""(year or None, month, day)."""


def _dates(text: str) -> list[list[Date]]:
    """The readings of each date written as 2026-11-28, November 28(, 2026), 28 November, or in numbers
    (12/07/2026 is July 12 or December 7): one reading, or two for a day and month that may be either."""
    found = [[(int(y), int(m), int(d))] for y, m, d in _ISO_DATE.findall(text)]
    found += [[(int(y) if y else None, _MONTHS[m.lower()], int(d))] for m, d, y in _MONTH_DAY.findall(text)]
    found += [[(int(y) if y else None, _MONTHS[m.lower()], int(d))] for d, m, y in _DAY_MONTH.findall(text)]
    found += [_numeric_readings(match) for match in _NUMERIC_DATE.finditer(text)]
    return [valid for readings in found if (valid := [d for d in readings if 1 <= d[1] <= 12 and 1 <= d[2] <= 31])]


def _numeric_readings(match: re.Match[str]) -> list[Date]:
    """The dates a `_NUMERIC_DATE` match may be: year first is year-month-day; else day and month either way."""
    year, _, month, day, a, b, short_year, c, d, dotted_year = match.groups()
    if year:
        return [(int(year), int(month), int(day))]
    first, second, y = (a, b, short_year) if a else (c, d, dotted_year)
    full = int(y) + 2000 if len(y) == 2 else int(y)
    return [(full, int(second), int(first)), (full, int(first), int(second))]


def _same_date(one: Date, other: Date) -> bool:
    return one[1:] == other[1:] and (one[0] is None or other[0] is None or one[0] == other[0])


_GROUND_WORD = re.compile(r"[\w-]{3,}")
_COMMON_WORDS = frozenset({"the", "and", "for", "you", "your", "are", "was", "were", "not", "has", "have", "this",
                           "that", "with", "true", "false", "none", "null", "can", "will", "now", "right", "its",
                           "our", "here", "there", "yes", "any", "all", "also", "been", "from", "which", "what",
                           "when", "where", "who", "how", "please", "let", "know", "thanks", "thank", "sure"})
# Of a sentence's words (common ones aside), the share the tool results must hold for it to pass.
GROUNDED_SHARE = 0.5


def _stem(word: str) -> str:
    word = word.lower()
    return word[:-1] if len(word) > 3 and word.endswith("s") else word


def grounded_sentences(text: str, tool_results: str) -> str:
    """The sentences of an uncited, tool-grounded answer that say what the tools returned: at least half
    of their words (common ones aside) and every number in them are in `tool_results`. One shared word
    was enough before, and "Your invoice is paid. The Team plan is free for life." passed whole on an
    invoice whose plan is "Plus"."""
    known = {_stem(w) for w in _GROUND_WORD.findall(tool_results)} - _COMMON_WORDS
    # By value: "2025-03-03" holds the 3 of "March 3"; a list of two orders, the 2 of "2 orders".
    numbers = Evidence.of(tool_results, counts=ToolFacts.of([tool_results]).counts)

    def grounded(sentence: str) -> bool:
        words = {_stem(w) for w in _GROUND_WORD.findall(sentence)} - _COMMON_WORDS
        if not words or numbers.lacks_a_number_of(sentence):
            return False
        return len(words & known) >= GROUNDED_SHARE * len(words)

    return keep_sentences(text, grounded)
