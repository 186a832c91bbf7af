"""Gate 2's check of an answer against the tools' data: a sentence that contradicts what a tool returned
is an unsupported claim, whether or not it cites an extract.

Two kinds of contradiction are caught, the clear ones only:

- **A state said to be otherwise.** A tool's status value (`"status": "shipped"`) negated ("it has not
  shipped yet"), a true flag (`"refundable": true`) negated, a false one (`"paid": false`) or a
  negative status (`"unpaid"`) stated as so ("it has been paid"); another state of the same kind said to
  be so ("your order is pending"), or a bare "Not yet" to a question about it (`gateway.pipeline.state_words`).
  A state that differs between the results' records (two orders, one shipped) is nobody's to contradict,
  and a hedged or conditional sentence ("if it hasn't shipped by Friday…", "I can't tell whether it has
  shipped") states nothing.
- **A value the evidence does not hold.** With tool data in the answer's reach, every number, date
  and identifier it states must be in the extracts, the tool results, the call's arguments, the
  conversation or the bot's own texts (`gateway.pipeline.evidence`): "$69.90" for a total of 59.90,
  "November 26" for `2026-11-28`, "A-1043" for order A-1042 are claims from nowhere.

An uncited answer resting on the tools keeps only the sentences that say what they returned
(`grounded_sentences`). A tool's text fields are data: their words ground an answer's words, but a
sentence planted in one (`"note": "the order has NOT shipped"`) is no state to hold an answer to.

Not caught: a state of a kind `state_words` does not list (a shop's own `awaiting_pickup`): a tool's statuses
are not listed anywhere, so an answer's word cannot be told for a status rather than a word of its own.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from gateway.pipeline.answer_language import in_english
from gateway.pipeline.evidence import MARKER, Evidence, is_identifier, squashed
from gateway.pipeline.number_words import IN_WORDS
from gateway.pipeline.sentences import keep_sentences
from gateway.pipeline.state_words import (
    WORD,
    asks_about,
    bare_answer,
    english,
    kinds_of,
    positive_of,
    related_words,
    said_as,
    stated,
    supposes,
)

_MINOR_UNITS = re.compile(r"amount|cents|minor", re.IGNORECASE)  # amount, unit_amount, total_cents
_MAX_DEPTH = 64  # a result nested thousands deep is walked this far, not until RecursionError
_STATE_VALUE = re.compile(r"[A-Za-z][A-Za-z _-]{3,30}")
# A string is a state only under a key that names one (`status`, `order_status`, `subscriptionState`): a
# text field ("note": "not shipped", planted or not) is data, never a state an answer is held to.
_STATE_KEY = frozenset({"status", "estado", "state", "stage", "phase", "condition", "availability", "plan", "tier",
                        "standing"})
_NO_STATE = frozenset({"none", "null", "true", "false", "unknown", "n/a"})
_STATE_WORDS = 3  # a longer text is prose, not a state
_KEY_PREFIXES = frozenset({"is", "has", "was", "are", "can", "did", "have"})
# Keys about the lookup itself, not about the thing looked up.
_THIS = frozenset({"your", "the", "this", "that", "my", "tu", "su", "el", "la", "ihre", "deine", "die"})
_LOOKUP_KEYS = frozenset({"found", "ok", "success", "error", "valid", "exists", "truncated"})

@dataclass(frozen=True, slots=True)
class ToolFacts:
    """The states the tool results give: each key's values (a status) and each flag's truth; and the
    values an answer may state that the results hold in other words: how many items their lists hold
    ("you have 2 open orders" counts what a tool returned), and an amount in cents as units."""

    states: dict[str, frozenset[str]] = field(default_factory=dict)
    flags: dict[str, frozenset[bool]] = field(default_factory=dict)
    counts: frozenset[Decimal] = frozenset()
    # Each state by (key, the key of the object holding it): an order's `status` apart from its payment's.
    owned: dict[tuple[str, str], frozenset[str]] = field(default_factory=dict)
    # The identifiers of the objects each key's states are of ("a1042"): "Your return RMA123 is pending"
    # names another thing than order A-1042, whose status is "shipped".
    ids: dict[str, frozenset[str]] = field(default_factory=dict)
    # Each key's states by an identifier of the object holding them, and by its last digits ("a1043" and
    # "1043"): of a list of orders, one shipped and one pending, "Order A-1043 has shipped" is held to
    # A-1043's. Looked up by the sentence's words, so a list of thousands costs a sentence no more.
    by_id: dict[str, dict[str, frozenset[str]]] = field(default_factory=dict)

    @classmethod
    def of(cls, results: Sequence[Any]) -> ToolFacts:
        """Read `results` (objects, lists, or texts that are JSON) to any depth up to `_MAX_DEPTH`."""
        states: dict[str, set[str]] = {}
        flags: dict[str, set[bool]] = {}
        counts: set[Decimal] = set()
        owned: dict[tuple[str, str], set[str]] = {}
        ids: dict[str, set[str]] = {}
        by_id: dict[str, dict[str, set[str]]] = {}
        pending: list[tuple[str, Any, int, str, frozenset[str]]] = [("", r, 0, "", frozenset()) for r in results]
        while pending:
            key, item, depth, owner, named = pending.pop()
            if depth > _MAX_DEPTH:
                continue
            if isinstance(item, str) and item.strip()[:1] in "[{":
                try:
                    item = json.loads(item)
                except (ValueError, RecursionError):
                    continue
            if isinstance(item, dict):
                own = frozenset(squashed(v) for v in item.values() if isinstance(v, str) and is_identifier(v))
                pending.extend((str(k), v, depth + 1, key, own) for k, v in item.items())
            elif isinstance(item, (list, tuple)):
                counts.add(Decimal(len(item)))
                counts |= _column_sums(item)
                pending.extend((key, v, depth + 1, owner, named) for v in item)
            elif isinstance(item, bool) and (phrase := _key_phrase(key)):
                flags.setdefault(phrase, set()).add(item)
            elif isinstance(item, int) and not isinstance(item, bool) and _MINOR_UNITS.search(key):
                # Payment APIs give an amount in the currency's smallest unit: `"amount": 5990` is €59.90.
                counts.add(Decimal(item) / 100)
            elif isinstance(item, str) and _STATE_KEY.intersection(_phrase(key).split()) \
                    and _STATE_VALUE.fullmatch(item.strip()) and len(item.split()) <= _STATE_WORDS \
                    and _phrase(item) not in _NO_STATE:
                states.setdefault(key.lower(), set()).add(_phrase(item))
                owned.setdefault((key.lower(), _phrase(owner)), set()).add(_phrase(item))
                ids.setdefault(key.lower(), set()).update(named)
                for ident in named:
                    digits = re.search(r"\d{3,}$", ident)
                    for token in {ident, digits.group(0) if digits else ident}:
                        by_id.setdefault(key.lower(), {}).setdefault(token, set()).add(_phrase(item))

        return cls({k: frozenset(v) for k, v in states.items()}, {k: frozenset(v) for k, v in flags.items()},
                   frozenset(counts), {k: frozenset(v) for k, v in owned.items()},
                   {k: frozenset(v) for k, v in ids.items()},
                   {k: {token: frozenset(v) for token, v in index.items()} for k, index in by_id.items()})

    def related_words(self) -> set[str]:
        """The words an answer may say the results' states with ("parcel", "on its way" of "shipped")."""
        return {word for values in self.states.values() for value in values for word in related_words(value)}

    def state_words(self) -> set[str]:
        """The results' states in English, Spanish and German ("versandt", "enviado" of "shipped")."""
        return {form for values in self.states.values() for value in values
                for form in said_as(english(value)) | {value}}

    def decides(self, question: str) -> bool:
        """Whether the tools' states answer `question` yes or no, so that `contradiction` judges a bare
        "Yes." to it: it asks about one state of a kind a result's state is of ("Has it shipped?", "Is it
        still pending?"), or about one of their flags ("Is it refundable?"); about one thing only ("Is my
        shipped order refundable?" asks of the flag, and "No" says nothing of shipping)."""
        states = {state for values in self.states.values() if len(values) == 1 for value in values
                  for state in {value}.union(*(others for _, others in kinds_of(value)))}
        flags = {phrase for phrase, truths in self.flags.items() if len(truths) == 1}
        return sum(asks_about(question, topic) for topic in states | flags) == 1

    def contradiction(self, sentence: str, *, question: str = "") -> str | None:
        """What `sentence` says against the tools' states, named without their values (logs hold no
        customer data), or None. `question`: what a sentence opening with a bare "No" or "Yes" answers."""
        words = _words(sentence)
        # A condition or a doubt makes its clause a rule or a guess ("The order is cancelled if it is not paid
        # within 5 days"), not the rest of the sentence ("Your order is pending, and we'll email you when it
        # ships" says it is pending).
        asserted = [word for clause in _clauses(sentence) if not supposes(clause) for word in clause]
        answer = bare_answer(MARKER.sub(" ", sentence)) if question and self.decides(question) else None
        for key, values in self.states.items():
            if len(values) == 1:
                (value,) = values
                if reason := _said_otherwise(words, key, value, asserted=asserted, ids=self.ids.get(key)):
                    return reason
                if answer and _answered_against(value, question, *answer):
                    return f"a tool's {key} answered to be otherwise"
                continue
            # Records that differ (one order shipped, one not) have no single state to hold to; the states of
            # two things (an order's and its payment's) each hold a sentence that names its thing.
            for (owned_key, owner), owned in self.owned.items():
                if owned_key == key and owner and len(owned) == 1 and len(
                        [other for other, _ in self.owned if other == key]) > 1:
                    if reason := _said_otherwise(words, f"{owner} {key}", next(iter(owned)), thing=owner,
                                                 asserted=asserted):
                        return reason
            # …and each record's state holds a sentence that names it by its identifier ("Order A-1043 has
            # shipped" of A-1043's "pending"), not one that says "your order" or "it".
            index = self.by_id.get(key, {})
            named = {token for i, word in enumerate(words) if any(c.isdigit() for c in word)
                     for token in (word, (words[i - 1] if i else "") + word) if len(index.get(token, ())) == 1}
            for token in named:
                if reason := _said_otherwise(words, key, next(iter(index[token])), asserted=asserted,
                                             ids=frozenset({token}), by_id=True):
                    return reason
        for phrase, truths in self.flags.items():
            if len(truths) != 1:
                continue
            (truth,) = truths
            said = stated(words, phrase)
            if answer and said is None and asks_about(question, phrase):
                said = answer[0]
            if said is not None and said is not truth:
                return f"a tool's {phrase!r} flag said to be the opposite"
        return None


def _said_otherwise(words: list[str], name: str, value: str, *, thing: str = "",
                    asserted: list[str] | None = None, ids: frozenset[str] | None = None,
                    by_id: bool = False) -> str | None:
    """Why `words` say against a tool's state `value` (named `name`), or None. With `thing` (the key of
    the object the state is of), only a sentence that names that thing counts ("your payment", not "it").
    Another state is looked for in `asserted`, the words of its clauses that suppose nothing, of a subject
    that is the thing: its noun, or one of its `ids` (any identifier when the results give none); `by_id`:
    only one of its `ids`."""
    def named(word: str, before: str) -> bool:
        return before in _THIS and word.removesuffix("s") == thing.removesuffix("s")

    def identified(word: str, before: str) -> bool:
        # "A-1042" is read as "a" and "1042"; "INV-2025-004217" ends in "004217".
        return any(c.isdigit() for c in word) and any(
            i == word or i == before + word or i.endswith(word) and len(word) >= 3 for i in ids or ())

    subject, pronouns = (named, False) if thing else (identified, False) if by_id else (None, True)
    if any(stated(words, form, subject=subject, pronouns=pronouns) is False
           for form in said_as(english(value)) | {value}):
        return f"a tool's {name} said not to be so"
    positive = positive_of(value)
    if positive and stated(words, positive, subject=subject, pronouns=pronouns) is True:
        return f"a tool's {name} said to be the opposite"
    for nouns, others in kinds_of(english(value)):
        def of_the_thing(word: str, before: str, nouns: frozenset[str] = nouns) -> bool:
            if thing:
                return named(word, before) or (thing in nouns and word in nouns and before in _THIS)
            if by_id:
                return identified(word, before)
            # "your order", "the parcel" (not "an order is pending until…", any order), or its identifier
            # ("A-1042", "ORD123"; not an amount: "your refund of 20 is…").
            if (word in nouns or word in _phrase(name).split()) and before in _THIS:
                return True
            if ids:
                return identified(word, before)
            return any(c.isdigit() for c in word) and (any(c.isalpha() for c in word) or len(before) == 1)

        if any(stated(words if asserted is None else asserted, form, subject=of_the_thing, pronouns=pronouns)
               is True for other in others for form in said_as(other)):
            return f"a tool's {name} said to be another"
    return None


def _answered_against(value: str, question: str, yes: bool, rest: str) -> bool:
    """Whether a bare yes or no to `question` says the state `value` is not so: "Not yet" to "Has it
    shipped?" (unless the rest says it: "No, it has shipped"), "Yes" to "Is it still pending?". A question
    about two states ("Has it shipped or is it still pending?") has no yes or no for an answer."""
    kind = {value}.union(*(others for _, others in kinds_of(value)))
    asked = [state for state in kind if asks_about(question, state)]
    if len(asked) != 1:
        return False
    return yes if asked[0] != value else not yes and value not in " ".join(_words(rest))


def _column_sums(records: list[Any] | tuple[Any, ...]) -> set[Decimal]:
    """The total of each number a list's records give under one key: the 3 items of lines of 2 and 1, the
    $59.90 of payments of 20.00 and 39.90 (and of 2000 and 3990 in cents)."""
    sums: dict[str, Decimal] = {}
    for record in records:
        for key, value in record.items() if isinstance(record, dict) else ():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                sums[key] = sums.get(key, Decimal(0)) + Decimal(str(value))
    totals = {total for key, value in sums.items() if len(records) > 1
              for total in (value, value / 100 if _MINOR_UNITS.search(key) else value)}
    return totals | {line for record in records if isinstance(record, dict) for line in _line_totals(record)}


_QUANTITY = re.compile(r"^(?:quantity|qty|count|units)$", re.IGNORECASE)
_PRICE = re.compile(r"price|unit_?amount|amount|cost", re.IGNORECASE)


def _line_totals(record: dict[Any, Any]) -> set[Decimal]:
    """A line's quantity times its price: "the 2 mugs came to $39.90" of `quantity` 2 and `price` 19.95."""
    def number(value: Any) -> Decimal | None:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        return Decimal(str(value)) if ok else None

    quantities = [q for key, value in record.items() if _QUANTITY.match(str(key)) and (q := number(value))]
    prices = [(str(key), p) for key, value in record.items() if _PRICE.search(str(key)) and (p := number(value))]
    return {total for q in quantities for key, p in prices
            for total in (q * p, q * p / 100 if _MINOR_UNITS.search(key) else q * p)}


# A "No" a mark ends is an answer ("No, it's still pending"), not the negation of the verb after it ("no
# está pendiente"): its words are read without it.
_ANSWER_NO = re.compile(r"\b(?:no|nope|nein)\b(?=\s*(?:[,;:!.\u2014\u2013]|\s-\s))", re.IGNORECASE)


_CLAUSE = re.compile(r"[,;:()\u2014\u2013]|\s-\s")


def _clauses(sentence: str) -> list[list[str]]:
    """The words of each of the sentence's clauses (parts between commas, colons, dashes, brackets)."""
    plain = _ANSWER_NO.sub(" ", MARKER.sub(" ", sentence)).lower().replace("\u2019", "'")
    return [WORD.findall(clause) for clause in _CLAUSE.split(plain)]


def _words(sentence: str) -> list[str]:
    return [word for clause in _clauses(sentence) for word in clause]


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


_GROUND_WORD = re.compile(r"[\w-]{3,}")
_COMMON_WORDS = frozenset({"the", "and", "for", "you", "your", "are", "was", "were", "not", "has", "have", "this",
                           "that", "with", "true", "false", "none", "null", "can", "will", "now", "right", "its",
                           "our", "here", "there", "yes", "any", "all", "also", "been", "from", "which", "what",
                           "when", "where", "who", "how", "please", "let", "know", "thanks", "thank", "sure",
                           "good", "great", "news", "glad", "happy", "about", "just", "still", "already",
                           "dollar", "dollars", "euro", "euros", "pound", "pounds", "cents",
                           # Negations and regrets: the contradiction check judges what they deny ("it isn't
                           # refundable, sorry"); they are no claim for the results to hold.
                           "isn", "aren", "wasn", "weren", "hasn", "haven", "hadn", "doesn", "didn", "don", "won",
                           "yet", "anymore", "longer", "nope", "sorry", "unfortunately", "afraid"})
# Of a sentence's words (common ones aside), the share the tool results must hold for it to pass.
GROUNDED_SHARE = 0.5


def _stem(word: str) -> str:
    """A word without its ending: "shipped", "shipping" and "ships" are all "ship"."""
    word = word.lower()
    for ending in ("ing", "ed", "es", "s"):
        if len(word) > len(ending) + 3 and word.endswith(ending):
            word = word[:-len(ending)]
            break
    return word[:-1] if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiou" else word


def _stems(words: list[str]) -> set[str]:
    return {_stem(word) for word in set(words) if word.lower() not in _COMMON_WORDS}


def grounded_sentences(text: str, tool_results: str, *, message: str = "", results: str | None = None,
                       facts: ToolFacts | None = None, read: tuple[Evidence, Evidence] | None = None,
                       reply_lang: str | None = None) -> str:
    """The sentences of an uncited, tool-grounded answer that say what the tools returned: every number in
    them is in `tool_results`, and at least half of their words (common ones aside) are the results' (in
    any form: "shipping" of "shipped") or words for the results' states ("your parcel is on its way" of a
    shipped order); or, in a sentence in another language than English (whose words the results cannot
    hold; `answer_language.in_english` tells by `reply_lang`, the turn's BCP 47 reply language), they name an identifier, a date or an amount with cents of `results` (the tools' answers without
    the calls' arguments, which are the model's words): "Tu pedido A-1042 ya ha sido enviado.", or one of
    the results' states in Spanish or German ("Nein, sie wurde bereits versandt."). The
    customer's words (`message`, what a bare "Yes." answers) ground nothing: "a free upgrade" asked for is
    no tool's. One shared word
    was enough before, and "Your invoice is paid. The Team plan is free for life." passed whole on an
    invoice whose plan is "Plus". `facts` and `read` (the `Evidence` of `tool_results` and of `results`):
    what the caller has read of them already."""
    # By value: "2025-03-03" holds the 3 of "March 3"; a list of two orders, the 2 of "2 orders".
    facts = facts or ToolFacts.of([tool_results])
    if read is None:
        numbers = Evidence.of(tool_results, counts=facts.counts)
        read = numbers, numbers if results is None else Evidence.of(results, counts=facts.counts)
    numbers, values = read
    # A date's words too: "2026-11-28" holds the "Nov" and "Saturday" of "It arrives on Saturday, Nov. 28".
    # A key's words too: `due_date` holds the "due" of "€59.90 is due".
    known = _stems([*_GROUND_WORD.findall(tool_results), *_GROUND_WORD.findall(tool_results.replace("_", " ")),
                    *facts.related_words()]) | numbers.date_words()

    # A bare "Yes." or "Not yet." opening the answer, to a question the tools' states decide: gate 2's
    # contradiction check has let it pass, so it says what they returned.
    decided = [facts.decides(message)]
    states = facts.state_words()  # "Nein, sie wurde bereits versandt." says the results' "shipped"

    def grounded(sentence: str) -> bool:
        # An amount in words is checked as a number ("forty-five dollars"), not as words the results hold; so
        # is a number (the "2026" of "11/28/2026", which `2026-11-28` holds as no word of its own).
        words = {w for w in _stems(_GROUND_WORD.findall(IN_WORDS.sub(" ", sentence))) if not w.isdigit()}
        bare, decided[0] = decided[0] and (answer := bare_answer(sentence)) is not None \
            and not _stems(_GROUND_WORD.findall(answer[1])), False
        if bare:
            return True
        if not words or numbers.lacks_a_number_of(sentence):
            return False
        if len(words & known) >= GROUNDED_SHARE * len(words):
            return True
        return not in_english(sentence, reply_lang) and (values.holds_a_value_of(sentence) or not states.isdisjoint(_words(sentence)))

    return keep_sentences(text, grounded)
