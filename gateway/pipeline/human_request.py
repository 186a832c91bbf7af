"""Is the customer asking for a person? `escalation.phrases` read as requests, not as substrings.

A phrase found anywhere used to hand the chat to an operator, and from then on the bot stays silent:
"I don't want to talk to a human, just tell me…", "Is there a live agent chat on the Team plan?" and
"How do I share a note with a real person who has no account?" all escalated. So a phrase counts
only as a request:
- whole words, in its own clause (split at punctuation and "but"), with no negation before it
  there ("don't", "not", "never", "no need", "without", "rather than"). "can't" is not one: "I can't
  reach a live agent" wants one;
- a phrase that is a verb phrase ("talk to a human") counts wherever it stands in its clause;
- a phrase that only names a person ("real person", "live agent") counts when a verb of wanting or
  reaching comes before it in the clause ("I need a real person", "connect me to a live agent"), or
  when it ends the clause ("Is there a live agent?", "real person please"), unless a note is shared,
  sent or synced *with* them ("How do I share a note with a real person?": the README's own example
  of a question for the bot). Inside a question about something else it is only a noun.

The words of negation, of wanting or reaching, and of politeness are English, Spanish and German (a
business in Spain or Germany writes its phrases in its customers' language: "hablar con una persona",
"mit einem Menschen sprechen"). A phrase in another language is found the same way, but has no verb
these lists know: it counts when it ends its clause ("…, 我要人工客服", "Vorrei un operatore umano").
"""

from __future__ import annotations

import re

# Clauses end at punctuation (Spanish opens a question or an exclamation with its own), the full-width kind
# (Chinese, Japanese) and Arabic's too, and at "but".
_CLAUSES = re.compile(r"[.,;:!?¿¡()\n，。！？；：（）、،؛؟]+|\b(?:but|pero|aber)\b")
# Chinese and Japanese put no space between words: a phrase in them ("人工客服") stands inside a clause
# ("我要人工客服") with letters on either side, so no word boundary is asked of its ends there.
_NO_SPACES = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
# Spanish "no" only before a verb of wanting: in English, "is there no way to talk to a human?" wants one.
_NEGATION = re.compile(r"\b(?:don'?t|do not|doesn'?t|does not|not|never|no need|without|rather than|instead of|"
                       r"no (?:me )?(?:quiero|quisiera|necesito|deseo|busco|pido|hace falta|pases|pongas)|nunca|"
                       r"sin|en vez de|en lugar de|nicht|kein\w*|nie|niemals|ohne|statt|anstatt)\b")
# Verbs a request for a person starts with; a phrase that starts with one of them is a verb phrase.
_REACH = re.compile(r"\b(?:talk|speak|chat|connect|transfer|put|get|give|want|wanna|need|reach|contact|call|"
                    r"see|escalate|prefer|like|request|"
                    r"habl|comunic|llam|quier|quisier|necesit|prefier|solicit|atien|atend|"
                    r"sprech|sprich|möcht|brauch|verbind|erreich)\w*\b|"
                    r"\b(?:dese(?:o|a|amos|aría|ar)|p[oó]n(?:me|erme|ganme)|p[aá]s(?:ame|eme|arme)|wollen)\b")
# German puts the verb last: "Ich will einen Mitarbeiter sprechen", "Kann ich bitte einen Menschen sprechen?",
# and so does a German verb phrase ("mit einem Menschen sprechen").
_LAST_VERB = r"(?:zu\s+)?(?:sprechen|erreichen|kontaktieren|anrufen)\b"
_REACH_AFTER = re.compile(rf"^\s+{_LAST_VERB}")
_ENDS_WITH_VERB = re.compile(rf"\b{_LAST_VERB}$")
# "… share a note with a real person": the person is who a note is shared with, not who is wanted. Only
# the product's verbs of sharing: "discuss this with a real person" or "have a word with a live agent"
# ask for one.
_SHARED_WITH = re.compile(r"\b(?:shar(?:e|es|ed|ing)|sen(?:d|ds|t|ding)|invit\w*|collaborat\w*|co-?edit\w*|sync\w*)\b"
                          r".*\bwith(?:\s+(?:a|an|the|some|one|another|any|your|my|our))?\s*$")
_TRAILING_POLITENESS = re.compile(r"(?:\s+(?:please|pls|plz|now|asap|thanks|thank you|right now|here|"
                                  r"por favor|ya|ahora|ahora mismo|gracias|bitte|jetzt|sofort|danke))*\s*$")


def asks_for_human(text: str, phrases: list[str]) -> str | None:
    """The configured phrase with which `text` asks for a person, or None (module docstring)."""
    for clause in _CLAUSES.split(_normalize(text)):
        clause = " ".join(clause.split())
        for phrase in phrases:
            wanted = " ".join(_normalize(phrase).split())
            if wanted and _is_request(clause, wanted):
                return phrase
    return None


def _is_request(clause: str, phrase: str) -> bool:
    # Nor inside a compound: "How do I get a human-readable export?" asks for no person.
    lead = "" if _NO_SPACES.match(phrase[0]) else r"(?<![\w-])"
    trail = "" if _NO_SPACES.match(phrase[-1]) else r"(?![\w-])"
    match = re.search(rf"{lead}{re.escape(phrase)}{trail}", clause)
    if match is None:
        return False
    before, after = clause[: match.start()], clause[match.end():]
    # With the phrase: its own first word may be what is negated ("no quiero hablar con una persona").
    if _NEGATION.search(clause[: match.end()]):
        return False
    if _REACH.match(phrase) or _ENDS_WITH_VERB.search(phrase) or _REACH.search(before):
        return True
    if _REACH_AFTER.match(after) and _TRAILING_POLITENESS.fullmatch(_REACH_AFTER.sub("", after)):
        return True
    return _SHARED_WITH.search(before) is None and _TRAILING_POLITENESS.fullmatch(after) is not None


def _normalize(text: str) -> str:
    """Lower case with typographic apostrophes made plain, so "don’t" reads as "don't"."""
    return text.lower().replace("\u2019", "'")
