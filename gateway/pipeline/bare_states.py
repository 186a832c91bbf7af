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
# A verb after the state, in its clause, makes the state's word describe its thing, not say its state: "The
# items returned within 30 days are refunded", "The payment refunded to your card was a duplicate".
_VERBS_AFTER = frozenset({"is", "are", "was", "were", "has", "have", "had", "gets", "get", "needs", "need", "takes",
                          "requires", "can", "could", "may", "might", "will", "would", "should", "must", "won't",
                          "can't", "cannot"})
# Where the state's clause ends: "Your payment failed and is being retried", "… failed, we will retry it".
_CLAUSE_ENDS = frozenset({"and", "or", "so", "which", "that", "who", "because", "as", "while", "it", "it's", "we",
                          "you", "they", "i", "he", "she", "y", "und"})


def said_bare(words: list[str], target: list[str], start: int, subject: Callable[[str, str], bool]) -> bool:
    """Whether `words[start]` (the word before the state `target`, past words like "already") is the
    state's thing as `subject` tells it, and the state a verb's past said of it plainly."""
    if len(target) != 1 or not target[0].endswith("ed") or not _HISTORY.isdisjoint(words):
        return False
    for word in words[start + 1:]:
        if word in _CLAUSE_ENDS:
            break
        if word in _VERBS_AFTER:
            return False
    return subject(words[start], words[start - 1] if start else "")
