"""The values an answer states, checked against everything it may rest on (gate 2, with tool data in play):
each number, date, hour, phone number and identifier of a sentence must be one the extracts, the tool
results and arguments, the conversation or the bot's own texts hold ("$69.90" for a total of 59.90,
"November 26" for `2026-11-28`, "A-1043" for order A-1042 are claims from nowhere), however written
("59,90 €" is the 59.9 of a tool's JSON, "17:00" the "5pm" of a prompt, 12/07/2026 December 7), or
worked out in the sentence from values it gives ("2 mugs at $10 each: $20"); in words, or near a held value
when the sentence says it is ("sixty dollars", "about 60 dollars": `gateway.pipeline.number_words`)."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

from gateway.pipeline.month_names import ALL_MONTHS, FULL_MONTH_NAMES, MONTHS, SPANISH_MONTHS, alternation
from gateway.pipeline.number_words import WHOLE, amounts_in_words, approximate, near

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
MARKER = re.compile(r"\[\s*\d{1,4}(?:\s*,\s*\d{1,4})*\s*\]")
_LIST_NUMBER = re.compile(r"^\s*\d{1,3}[.)]\s+")
_NUMBER = re.compile(r"\d+")
# A number as written, with its thousands or decimal separators: "59.90", "1,200", "59,90".
_AMOUNT = re.compile(r"\d+(?:[.,]\d+)*")
_CENTS = re.compile(r"(?<![\d.,])\d+(?:,\d{3})*[.,]\d{2}(?![\d.,]\d)")  # 59.90, 1,200.50, 59,90
_ACRONYM = re.compile(r"\b\d+[A-Z]{2,}\b")  # 2FA, 3DS: names, not numbers
_MONTHS = MONTHS
_MONTH = alternation(_MONTHS)
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})")
_MONTH_DAY = re.compile(rf"\b({_MONTH})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s+(\d{{4}}))?", re.IGNORECASE)
# "28 November", "28th of November", German "28. November 2026", Spanish "2 de diciembre (de 2026)" (a Spanish
# name only after "de": "2 mayo jars" is no date). One pattern: a 16,000-character result is searched once.
_DAY_MONTH = re.compile(rf"(?<![$€£¥])\b(\d{{1,2}})(?:st|nd|rd|th|\.(?=\s+(?:{FULL_MONTH_NAMES})\b))?\s+(of\s+|de\s+)?"
                        rf"({alternation(ALL_MONTHS)})\b\.?(?:,?\s+(?:de\s+|del\s+)?(\d{{4}}))?", re.IGNORECASE)
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
_DURATION = re.compile(r"\b(\d{1,4}|a|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)[\s-]+"
                       r"(?:calendar\s+)?(days?|weeks?|months?)\b")
_MAX_OPERANDS = 24
# Counts in words an answer may multiply by; "one" is left out (one plus any price is a new price).
_COUNT_WORDS = {w: n for n, w in enumerate(
    "two three four five six seven eight nine ten eleven twelve".split(), start=2)}
_TOKEN = re.compile(r"(?<![\w-])[A-Za-z0-9]+(?:[-_][A-Za-z0-9]+)*")
_UNIT = re.compile(r"\d+[a-z]{1,3}|[a-z]{1,2}\d{1,2}", re.IGNORECASE)  # 2FA, 24h, 10am, v2, Q4: no identifiers


@dataclass(frozen=True, slots=True)
class Evidence:
    """The numbers, dates and identifiers of everything an answer may rest on, to look a sentence's up in."""

    numbers: frozenset[Decimal]
    dates: tuple[Date, ...]
    squashed: str
    times: frozenset[tuple[int, int]] = frozenset()
    phones: frozenset[str] = frozenset()  # the digits of each phone-like number

    @classmethod
    def of(cls, text: str, *, counts: frozenset[Decimal] = frozenset()) -> Evidence:
        """Read once per answer: the extracts, the tool results and arguments, the question, the bot's texts,
        with the values the results hold in other words (`ToolFacts.counts`: their lists' lengths, amounts
        in cents as units)."""
        numbers = {Decimal(n) for n in _NUMBER.findall(text)}.union(*map(_readings, _AMOUNT.findall(text)))
        numbers |= {Decimal(n) for n in counts}
        return cls(frozenset(numbers), tuple(date for readings in _dates(text) for date in readings), _squashed(text),
                   frozenset(t for match in _TIME.finditer(text) for t in _time_readings(match)),
                   frozenset(d for match in _PHONE.finditer(text) if len(d := _digits(match.group(0))) >= _PHONE_DIGITS))

    def __or__(self, other: Evidence) -> Evidence:
        """What the two texts hold together: a long tool result is read once, not once per check."""
        return Evidence(self.numbers | other.numbers, self.dates + other.dates, f"{self.squashed} {other.squashed}",
                        self.times | other.times, self.phones | other.phones)

    def holds_date(self, readings: list[Date], *, within: str = "") -> bool:
        """Whether one of a written date's `readings` is a date of the evidence, or one a duration stated
        `within` its sentence away from one ("until December 28 (30 days)" of a delivery on 2026-11-28)."""
        if any(_same_date(date, other) for date in readings for other in self.dates):
            return True
        shifts = _durations(within)
        return bool(shifts) and any(_same_date(date, shifted) for other in self.dates if other[0] is not None
                                    for shift in shifts for shifted in _shifted(other, shift) for date in readings)

    def date_words(self) -> set[str]:
        """The words an answer writes the evidence's dates with: each month's names, the weekday of a date
        with its year, the day as an ordinal ("Saturday, November 28th" of 2026-11-28)."""
        words: set[str] = set()
        for year, month, day in self.dates:
            words |= {name for name, n in ALL_MONTHS.items() if n == month}
            words.add(f"{day}{'th' if 10 <= day % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(day % 10, 'th')}")
            if year is not None:
                try:
                    words.add(dt.date(year, month, day).strftime("%A").lower())
                except ValueError:
                    pass
        return words

    def unsupported(self, sentence: str) -> str | None:
        """A number, date or identifier `sentence` states that the evidence does not hold, or None."""
        plain = _LIST_NUMBER.sub("", MARKER.sub(" ", sentence))
        for readings in _dates(plain):
            if not self.holds_date(readings, within=plain):
                return "a date no extract or tool result holds"
        for token in _TOKEN.findall(plain):
            if _is_identifier(token) and _squashed(token) not in self.squashed:
                return "an identifier no extract or tool result holds"
        return "a number no extract or tool result holds" if self.lacks_a_number_of(plain) else None

    def holds_a_value_of(self, sentence: str) -> bool:
        """Whether `sentence` states an identifier, a date or an amount with cents the evidence holds
        ("A-1042", "November 28", "$59.90"): it speaks of what the evidence speaks of, in whatever language."""
        plain = MARKER.sub(" ", sentence)
        return any(self.holds_date(readings) for readings in _dates(plain)) or any(
            _is_identifier(token) and _squashed(token) in self.squashed for token in _TOKEN.findall(plain)) or any(
            _readings(amount) & self.numbers for amount in _CENTS.findall(plain))

    def lacks_a_number_of(self, sentence: str) -> bool:
        """Whether `sentence` states a number the evidence does not hold, however written ("$59.90" is
        the 59.9 of a tool's JSON, "59,90 €" too)."""
        plain = within = _LIST_NUMBER.sub("", MARKER.sub(" ", sentence))
        # A date the evidence holds is one value, not three ("28/11/26": no 26 needed; "December 28" worked
        # out from a date and "30 days": no 28 needed).
        for pattern, read in _DATE_FORMS:
            plain = pattern.sub(lambda m: " " if self.holds_date(read(m), within=within) else m.group(0), plain)
        # So is an hour ("17:00" for the evidence's "5pm") and a phone number grouped another way; one the
        # evidence does not hold is read as its numbers, as before.
        plain = _TIME.sub(lambda m: " " if self._holds_time(m) else m.group(0), plain)
        plain = _PHONE.sub(lambda m: " " if self._holds_phone(m.group(0)) else m.group(0), plain)
        plain = _ACRONYM.sub(" ", WHOLE.sub(" ", plain))
        stated: list[set[Decimal]] = []
        rounded: list[set[Decimal]] = []  # "about 60": near a held value will do
        for start, values in [*((m.start(), _readings(m.group(0))) for m in _AMOUNT.finditer(plain)),
                              *((start, {value}) for start, value in amounts_in_words(plain))]:
            if approximate(plain[:start]):
                rounded.append(values)
            else:
                stated.append(values)
        if any(not any(near(value, self.numbers) for value in values) for values in rounded):
            return True
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
    """The readings of each date written as 2026-11-28, November 28(, 2026), 28 November, 28. November,
    2 de diciembre, or in numbers
    (12/07/2026 is July 12 or December 7): one reading, or two for a day and month that may be either."""
    found = [read(match) for pattern, read in _DATE_FORMS for match in pattern.finditer(text)]
    return [valid for readings in found if (valid := [d for d in readings if 1 <= d[1] <= 12 and 1 <= d[2] <= 31])]


def _durations(text: str) -> list[tuple[int, int]]:
    """(days, months) of each duration `text` states: "30 days", "two weeks", "12 months"."""
    found = []
    for count, unit in _DURATION.findall(text.lower()):
        n = int(count) if count.isdigit() else _COUNT_WORDS.get(count, 1 if count in ("a", "one") else 0)
        found.append((n * (7 if unit.startswith("week") else 1), 0) if unit.startswith(("day", "week")) else (0, n))
    return [shift for shift in found if any(shift)]


def _shifted(date: Date, shift: tuple[int, int]) -> list[Date]:
    """`date` moved `shift` (days, months) later and earlier; none that is no date."""
    year, month, day = date
    out: list[Date] = []
    for sign in (1, -1):
        try:
            if shift[0]:
                moved = dt.date(year, month, day) + dt.timedelta(days=sign * shift[0])
            else:
                months = year * 12 + month - 1 + sign * shift[1]
                moved = dt.date(months // 12, months % 12 + 1, day)
        except (ValueError, OverflowError):
            continue
        out.append((moved.year, moved.month, moved.day))
    return out


def _numeric_readings(match: re.Match[str]) -> list[Date]:
    """The dates a `_NUMERIC_DATE` match may be: year first is year-month-day; else day and month either way."""
    year, _, month, day, a, b, short_year, c, d, dotted_year = match.groups()
    if year:
        return [(int(year), int(month), int(day))]
    first, second, y = (a, b, short_year) if a else (c, d, dotted_year)
    full = int(y) + 2000 if len(y) == 2 else int(y)
    return [(full, int(second), int(first)), (full, int(first), int(second))]


def _day_month_readings(match: re.Match[str]) -> list[Date]:
    """The date a `_DAY_MONTH` match is; none for a Spanish month's name without "de" before it."""
    day, of, month, year = match.groups()
    name = month.lower()
    if name in SPANISH_MONTHS and name not in _MONTHS and not (of or "").lower().startswith("de"):
        return []
    return [(int(year) if year else None, ALL_MONTHS[name], int(day))]


_DATE_FORMS: list[tuple[re.Pattern[str], Callable[[re.Match[str]], list[Date]]]] = [
    (_ISO_DATE, lambda m: [(int(m[1]), int(m[2]), int(m[3]))]),
    (_MONTH_DAY, lambda m: [(int(m[3]) if m[3] else None, _MONTHS[m[1].lower()], int(m[2]))]),
    (_DAY_MONTH, _day_month_readings),
    (_NUMERIC_DATE, _numeric_readings),
]


def _same_date(one: Date, other: Date) -> bool:
    return one[1:] == other[1:] and (one[0] is None or other[0] is None or one[0] == other[0])


# For `tool_facts`, which tells which thing a sentence names by its identifier.
is_identifier, squashed = _is_identifier, _squashed
