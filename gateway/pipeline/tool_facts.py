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
  conversation or the bot's own texts (`gateway.pipeline.evidence`): "$69.90" for a total of 59.90,
  "November 26" for `2026-11-28`, "A-1043" for order A-1042 are claims from nowhere.

An uncited answer resting on the tools keeps only the sentences that say what they returned
(`grounded_sentences`). A tool's text fields are data: their words ground an answer's words, but a
sentence planted in one (`"note": "the order has NOT shipped"`) is no state to hold an answer to.

Not caught: a state said to be another one ("pending" for "shipped"), since a tool's statuses are not
listed anywhere, so an answer's word cannot be told for a status rather than a word of its own.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from gateway.pipeline.evidence import MARKER, Evidence
from gateway.pipeline.sentences import keep_sentences

_MINOR_UNITS = re.compile(r"amount|cents|minor", re.IGNORECASE)  # amount, unit_amount, total_cents
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
_HEDGES = frozenset({"if", "unless", "when", "once", "until", "whether", "before", "after", "think", "seems",
                     "appears", "ask", "asked", "wonder", "maybe", "perhaps", "probably", "possibly", "unsure",
                     "unable"})
# Words of knowing and checking doubt only when denied ("not sure", "can't tell", "don't know"): "I can
# confirm that your order has not shipped", "Sure, …", "As you can see, …" state what follows.
_KNOWING = frozenset({"sure", "know", "see", "tell", "find", "check", "confirm", "able", "say", "certain"})
_DENIALS = frozenset({"not", "never", "no", "don't", "can't", "cannot", "couldn't", "won't", "wouldn't", "isn't",
                      "wasn't", "didn't", "doesn't", "aren't"})
# A modal that governs the state makes it a possibility or an action, not the state: "may have shipped",
# "will be refunded", "we can't open a second ticket".
_MODALS = frozenset({"can", "could", "may", "might", "should", "would", "will", "must", "can't", "cannot",
                     "couldn't", "shouldn't", "won't", "wouldn't", "mustn't"})

@dataclass(frozen=True, slots=True)
class ToolFacts:
    """The states the tool results give: each key's values (a status) and each flag's truth; and the
    values an answer may state that the results hold in other words: how many items their lists hold
    ("you have 2 open orders" counts what a tool returned), and an amount in cents as units."""

    states: dict[str, frozenset[str]] = field(default_factory=dict)
    flags: dict[str, frozenset[bool]] = field(default_factory=dict)
    counts: frozenset[Decimal] = frozenset()

    @classmethod
    def of(cls, results: Sequence[Any]) -> ToolFacts:
        """Read `results` (objects, lists, or texts that are JSON) to any depth up to `_MAX_DEPTH`."""
        states: dict[str, set[str]] = {}
        flags: dict[str, set[bool]] = {}
        counts: set[Decimal] = set()
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
                counts.add(Decimal(len(item)))
                counts |= _column_sums(item)
                pending.extend((key, v, depth + 1) for v in item)
            elif isinstance(item, bool) and (phrase := _key_phrase(key)):
                flags.setdefault(phrase, set()).add(item)
            elif isinstance(item, int) and not isinstance(item, bool) and _MINOR_UNITS.search(key):
                # Payment APIs give an amount in the currency's smallest unit: `"amount": 5990` is €59.90.
                counts.add(Decimal(item) / 100)
            elif isinstance(item, str) and _STATE_KEY.intersection(_phrase(key).split()) \
                    and _STATE_VALUE.fullmatch(item.strip()) and len(item.split()) <= _STATE_WORDS \
                    and _phrase(item) not in _NO_STATE:
                states.setdefault(key.lower(), set()).add(_phrase(item))

        return cls({k: frozenset(v) for k, v in states.items()}, {k: frozenset(v) for k, v in flags.items()},
                   frozenset(counts))

    def contradiction(self, sentence: str) -> str | None:
        """What `sentence` says against the tools' states, named without their values (logs hold no
        customer data), or None."""
        words = _WORD.findall(MARKER.sub(" ", sentence).lower().replace("\u2019", "'"))
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


def _column_sums(records: list[Any] | tuple[Any, ...]) -> set[Decimal]:
    """The total of each number a list's records give under one key: the 3 items of lines of 2 and 1, the
    $59.90 of payments of 20.00 and 39.90 (and of 2000 and 3990 in cents)."""
    sums: dict[str, Decimal] = {}
    for record in records:
        for key, value in record.items() if isinstance(record, dict) else ():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                sums[key] = sums.get(key, Decimal(0)) + Decimal(str(value))
    return {total for key, value in sums.items() if len(records) > 1
            for total in (value, value / 100 if _MINOR_UNITS.search(key) else value)}


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
    hedge = next((i for i, w in enumerate(words) if w in _HEDGES or (
        w in _KNOWING and _DENIALS.intersection(words[max(0, i - 3):i]))), len(words))
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
        k = j - 1  # past the negation and auxiliaries ("may not have shipped"): a modal there governs the state
        while k >= 0 and (words[k] in _BRIDGE or words[k] in _NEGATIONS or words[k] in ("have", "be")):
            k -= 1
        if word in _MODALS or (k >= 0 and words[k] in _MODALS and (word in _NEGATIONS or word in _COPULAS)):
            continue
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
    # By value: "2025-03-03" holds the 3 of "March 3"; a list of two orders, the 2 of "2 orders".
    numbers = Evidence.of(tool_results, counts=ToolFacts.of([tool_results]).counts)
    # A date's words too: "2026-11-28" holds the "Nov" and "Saturday" of "It arrives on Saturday, Nov. 28".
    known = {_stem(w) for w in _GROUND_WORD.findall(tool_results)} - _COMMON_WORDS | numbers.date_words()

    def grounded(sentence: str) -> bool:
        words = {_stem(w) for w in _GROUND_WORD.findall(sentence)} - _COMMON_WORDS
        if not words or numbers.lacks_a_number_of(sentence):
            return False
        return len(words & known) >= GROUNDED_SHARE * len(words)

    return keep_sentences(text, grounded)
