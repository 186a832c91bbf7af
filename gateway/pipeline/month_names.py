"""Month names an answer writes a date with, in English, German and Spanish: for gate 2's reading of
dates (`evidence`) and of sentences (`sentences`: "am 28. November" is one sentence, not two)."""

from __future__ import annotations

import re

_ENGLISH = [("jan", "january"), ("feb", "february"), ("mar", "march"), ("apr", "april"), ("may",), ("jun", "june"),
            ("jul", "july"), ("aug", "august"), ("sep", "sept", "september"), ("oct", "october"),
            ("nov", "november"), ("dec", "december")]
# German's names that English has not ("April", "August", "September", "November" are the same).
_GERMAN = [("januar", "jänner"), ("februar",), ("märz",), (), ("mai",), ("juni",), ("juli",), (), (), ("oktober",),
           (), ("dezember",)]
_SPANISH = [("enero",), ("febrero",), ("marzo",), ("abril",), ("mayo",), ("junio",), ("julio",), ("agosto",),
            ("septiembre", "setiembre"), ("octubre",), ("noviembre",), ("diciembre",)]

MONTHS = {name: n for n, names in enumerate(_ENGLISH, start=1) for name in names} | {
    name: n for n, names in enumerate(_GERMAN, start=1) for name in names}
"""English and German month names (and English abbreviations), lower case, to their numbers."""
SPANISH_MONTHS = {name: n for n, names in enumerate(_SPANISH, start=1) for name in names}
"""Spanish month names, read only after "de" ("2 de diciembre"): "2 mayo jars" is no date."""
ALL_MONTHS = MONTHS | SPANISH_MONTHS


def alternation(names: dict[str, int]) -> str:
    """A regex alternation of `names`, longest first ("june" before "jun")."""
    return "|".join(sorted(names, key=len, reverse=True))


# A full month name after a day's ordinal dot ("am 28. November"): not an abbreviation ("Dec. 28" ends its own
# way), nor "May", which also starts a sentence after an amount ("Plus costs $6. May I help with more?").
FULL_MONTH_NAMES = alternation({name: n for name, n in MONTHS.items() if len(name) > 3 or name == "mai"})
FULL_MONTH = re.compile(rf"(?:{FULL_MONTH_NAMES})\b", re.IGNORECASE)
