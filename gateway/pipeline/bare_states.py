"""A state said with no "is" or "has" before it: "your payment failed", "order A-1042 shipped" (for
`state_words.stated`). Only a state that is a verb's past ("failed", "shipped", "cancelled"), right after
the thing it is of ("your payment", the order's identifier), and in a sentence that tells of no change
over time: "Your payment failed last week but went through on retry" tells the past, not the state."""

from __future__ import annotations

from collections.abc import Callable

# Words of a sentence that tells a thing's history: the state it names may be an earlier one.
_HISTORY = frozenset({"but", "however", "now", "then", "later", "earlier", "previously", "initially", "first",
                      "last", "yesterday", "ago", "again", "retry", "retried", "since", "originally", "twice",
                      "still", "eventually", "finally", "although", "though", "pero", "aber", "ahora", "jetzt"})


def said_bare(words: list[str], target: list[str], start: int, subject: Callable[[str, str], bool]) -> bool:
    """Whether `words[start]` (the word before the state `target`, past words like "already") is the
    state's thing as `subject` tells it, and the state a verb's past said of it plainly."""
    if len(target) != 1 or not target[0].endswith("ed") or not _HISTORY.isdisjoint(words):
        return False
    return subject(words[start], words[start - 1] if start else "")
