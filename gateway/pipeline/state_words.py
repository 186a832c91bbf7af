"""How an answer's sentence speaks of a state, for gate 2's check against the tools' states (`tool_facts`):
whether it says one is so ("has been paid", "ist versandt"), is not so ("has not shipped yet", "no ha sido
enviado"), or neither (hedged, asked, only mentioned); which other state of the same kind it says a thing
is in ("pending" of an order the tool says has shipped); and what a bare "No" or "Not yet" answers.

The words are English, with the few of Spanish and German a state is said with (negations, copulas, a bare
yes or no): a tool's state in the answer's language ("estado": "enviado") is held like an English one, and
the listed states have their Spanish and German words ("no ha sido enviado" of "status": "shipped")."""

from __future__ import annotations

import re
from collections.abc import Callable

from gateway.pipeline.bare_states import said_bare

WORD = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)?")
_NEGATIONS = frozenset({"not", "never", "nor", "non", "isn't", "hasn't", "wasn't", "haven't", "aren't",
                        "weren't", "doesn't", "didn't", "hadn't", "nunca", "nicht", "nie"})
# Spanish says "no" before the verb ("no ha sido enviado"); right before a state's word it is English
# and speaks of some other thing: "you have no pending refunds".
_VERB_NEGATIONS = _NEGATIONS | {"no"}
# A state's word with one of these is its opposite: "unpaid", "inactive", "nonrefundable".
_NEGATIVE_PREFIXES = ("un", "in", "non")
_COPULAS = frozenset({"is", "are", "was", "were", "it's", "has", "have", "had", "got",
                      "es", "está", "están", "ha", "han", "fue", "ist", "sind", "wurde", "wurden"})
# Words between a negation or a copula and the state it speaks of ("has not yet been shipped").
_BRIDGE = frozenset({"yet", "be", "been", "being", "already", "now", "fully", "actually", "even", "really", "currently",
                     "still", "just", "sido", "ya", "todavía", "aún", "noch", "schon", "bereits", "worden"})
# A sentence holding one of these before the state asks, doubts or supposes: it states nothing.
_HEDGES = frozenset({"if", "unless", "when", "once", "until", "whether", "before", "after", "think", "seems",
                     "appears", "ask", "asked", "wonder", "maybe", "perhaps", "probably", "possibly", "unsure",
                     "unable", "si", "cuando", "quizás", "wenn", "falls", "ob", "vielleicht"})
# Words of knowing and checking doubt only when denied ("not sure", "can't tell", "don't know"): "I can
# confirm that your order has not shipped", "Sure, …", "As you can see, …" state what follows.
_KNOWING = frozenset({"sure", "know", "see", "tell", "find", "check", "confirm", "able", "say", "certain"})
_DENIALS = frozenset({"not", "never", "no", "don't", "can't", "cannot", "couldn't", "won't", "wouldn't", "isn't",
                      "wasn't", "didn't", "doesn't", "aren't"})
# A modal that governs the state makes it a possibility or an action, not the state: "may have shipped",
# "will be refunded", "we can't open a second ticket".
_MODALS = frozenset({"can", "could", "may", "might", "should", "would", "will", "must", "can't", "cannot",
                     "couldn't", "shouldn't", "won't", "wouldn't", "mustn't"})
# What a sentence's subject may be for its state to be the tool's thing's: "it", its identifier, its noun.
_PRONOUNS = frozenset({"it", "it's", "this", "that", "which", "everything", "all", "both"})

# The states of one kind of thing, one at a time: a tool's state of a kind, the answer's another of that
# kind said to be so, is a contradiction ("pending" for "shipped"). Each state with those its value also
# makes true ("delivered" has shipped; "resolved" is closed; a carrier's "delivered" may be a day ahead of
# a shop's "shipped"), and each kind with the nouns that name such a thing ("your parcel is pending"
# speaks of the order; "your refund is pending" does not).
_KINDS: tuple[tuple[frozenset[str], dict[str, frozenset[str]]], ...] = tuple(
    (frozenset(nouns.split()), {state: frozenset(also.split(",")) - {""} for state, _, also in
                                (entry.partition(":") for entry in states.split("; "))})
    for nouns, states in (
        ("order orders package parcel shipment delivery purchase item items pedido pedidos paquete envío compra "
         "bestellung bestellungen paket sendung lieferung",
         "pending:processing; processing:pending; on hold; backordered; "
         "shipped:dispatched,in transit,out for delivery,delivered,on its way; "
         "dispatched:shipped,in transit,out for delivery,delivered,on its way; "
         "in transit:shipped,dispatched,out for delivery,delivered,on its way; "
         "out for delivery:shipped,dispatched,in transit,delivered,on its way; "
         # "On its way" is no tool's state, but an answer's word for the stages after shipping: of a pending
         # order it says another state, of a delivered or returned one it is a stage ahead or behind.
         "on its way:shipped,dispatched,in transit,out for delivery; "
         "delivered:shipped,dispatched,on its way; cancelled:canceled; canceled:cancelled; "
         "returned:delivered,shipped,dispatched,on its way"),
        ("ticket tickets request case issue solicitud caso incidencia anfrage",
         "open; in progress:open; on hold:open; resolved:closed; closed:resolved"),
        ("payment invoice bill charge balance pago factura cobro zahlung rechnung",
         "paid:succeeded; succeeded:paid; failed; overdue; refunded:paid,succeeded; void; draft"),
    ))

# The states above as a Spanish or German answer says them of an English tool's state (and the other way
# round): "no ha sido enviado" of `"status": "shipped"` denies it as "has not shipped" does.
_TRANSLATIONS = {english: frozenset(words.split()) for english, words in (
    ("shipped", "enviado enviada despachado despachada versandt verschickt"),
    ("delivered", "entregado entregada zugestellt geliefert"),
    ("pending", "pendiente ausstehend"),
    ("cancelled", "cancelado cancelada anulado anulada storniert"),
    ("canceled", "cancelado cancelada anulado anulada storniert"),
    ("returned", "devuelto devuelta retourniert"),
    ("paid", "pagado pagada bezahlt"),
    ("refunded", "reembolsado reembolsada erstattet"),
    ("failed", "fallido fallida fehlgeschlagen"),
    ("overdue", "vencido vencida überfällig"),
    ("open", "abierto abierta offen"),
    ("closed", "cerrado cerrada geschlossen"),
    ("resolved", "resuelto resuelta gelöst"),
)}


def english(value: str) -> str:
    """The English state a tool's Spanish or German one is ("enviado" → "shipped"), else `value`."""
    return next((state for state, words in _TRANSLATIONS.items() if value in words), value)


def said_as(state: str) -> frozenset[str]:
    """The words an answer says the English `state` with, in English, Spanish or German."""
    return _TRANSLATIONS.get(state, frozenset()) | {state}


def supposes(words: list[str]) -> bool:
    """Whether a clause's `words` hold a condition or a doubt anywhere ("The order is cancelled if it is not
    paid…"): a rule, not the state of the customer's thing."""
    return not _HEDGES.isdisjoint(words)


def kinds_of(value: str) -> list[tuple[frozenset[str], set[str]]]:
    """For each kind of thing `value` is a state of: its nouns, and its states that `value` says are not so."""
    return [(nouns, set(states) - {value} - states[value]) for nouns, states in _KINDS if value in states]


def related_words(value: str) -> set[str]:
    """The words an answer may say a thing in state `value` with: its kind's nouns and the states `value`
    makes true ("your parcel is on its way" of `"status": "shipped"`)."""
    return {word for nouns, states in _KINDS if value in states
            for word in (*nouns, *(w for state in states[value] for w in state.split()))}


def positive_of(value: str) -> str:
    """The state a negative value denies: "unpaid" → "paid", "not shipped" → "shipped"; else ""."""
    if value.startswith("not "):
        return value[4:]
    if value.startswith("un") and len(value) >= 6 and " " not in value:
        return value[2:]
    return ""


def stated(words: list[str], phrase: str, *, subject: Callable[[str, str], bool] | None = None,
           pronouns: bool = True) -> bool | None:
    """Whether the sentence's `words` state `phrase` as so (True: "has been paid"), as not so (False: "has
    not shipped yet", "is yet to be shipped", "no longer active", "never got shipped", "is unpaid"), or
    neither (None: not there, only mentioned, or hedged). A negation reaches the phrase only across words
    like "yet", "been" and adverbs ("not successfully shipped"): in "not pending, it's shipped" it is
    pending's, not shipped's. With `subject`, only where the word before the verb (and the one before
    that) pass it ("your order is pending", not "your refund is pending"), or (with `pronouns`) is "it"."""
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
        who = k  # the subject, before the verbs ("your order has not shipped")
        while who >= 0 and (words[who] in _COPULAS or words[who] in _BRIDGE or words[who] in _VERB_NEGATIONS):
            who -= 1
        # "your payment failed": the thing, then its state, with no "is" or "has" between.
        bare = subject is not None and word not in _NEGATIONS and word not in _COPULAS and said_bare(
            words, target, j, subject)
        if subject is not None and not bare and not (who >= 0 and (
                (pronouns and words[who] in _PRONOUNS) or subject(words[who], words[who - 1] if who else ""))):
            continue
        if bare:
            so = True
        elif word in _NEGATIONS or (word, previous) in (("longer", "no"), ("to", "yet")):
            so = False
        elif word in _COPULAS:
            so = previous not in _VERB_NEGATIONS  # "never got shipped", "not was", "no está"
        else:
            continue
        if so is not opposite:
            said = True if said is None else said
        else:
            said = False
    return said


# A sentence that opens with a bare yes or no answers the question before it.
_BARE_ANSWER = re.compile(r"^\W*(?:(?P<no>not\s+yet|no(?:pe)?|noch\s+nicht|nein|todav[ií]a\s+no|a[uú]n\s+no)"
                          r"|(?P<yes>yes|yep|yeah|s[ií]|ja))(?:\s*[,.!;:\u2014-]|\s*$|(?<=yet)\b)", re.IGNORECASE)
_TWO_QUESTIONS = frozenset({"and", "or", "also", "y", "o", "und", "oder"})
_QUESTION_DENIES = frozenset({"not", "never", "isn't", "hasn't", "wasn't", "haven't", "aren't", "didn't", "doesn't",
                              "no", "nicht", "nunca"})


def bare_answer(sentence: str) -> tuple[bool, str] | None:
    """(yes?, the rest of the sentence) of one that opens with a bare "Yes," "No." or "Not yet", else None."""
    match = _BARE_ANSWER.match(sentence)
    return None if match is None else (match.group("yes") is not None, sentence[match.end():])


def asks_about(question: str, phrase: str) -> bool:
    """Whether `question` asks whether `phrase` is so ("Has it shipped?", "Is it still pending?"), not
    whether it is not ("Hasn't it shipped yet?", where "No" is ambiguous). Of several questions, the last
    is the one answered: "Has it shipped? Can I still change the address?". One that asks two things
    ("Has it shipped, and can I still change the address?") has no yes or no for an answer."""
    asked = re.findall(r"[^.!?¿]*\?", question)
    words = [w.lower() for w in WORD.findall(asked[-1] if asked else question)]
    if _TWO_QUESTIONS.intersection(words):
        return False
    target = phrase.split()
    return not _QUESTION_DENIES.intersection(words) and any(
        words[i:i + len(target)] == target for i in range(len(words) - len(target) + 1))
