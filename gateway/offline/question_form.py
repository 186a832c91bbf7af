"""What a question asks for, read from its form: a procedure, a duration, a frequency, a number or an
amount ("how much", "what's the limit"), or a subject (the words that only frame it left out).

Pure text work shared by the offline responder's scoring (`gateway.offline.extractive`).
"""

from __future__ import annotations

import re

from gateway.offline.extracts import terms
from rag.framing import FRAMING_WORDS

# "How do I reset my password?" asks for a procedure: its answer is the numbered steps.
_HOW_TO = re.compile(r"^\s*(?:how (?:do|can|should|would|may) (?:i|we|you|one)\b|how to\b|what are the steps\b)", re.I)
_HOW = re.compile(r"^\s*how\b", re.I)
# "I want a refund" and "I'd like to delete my account" ask for a procedure as "How do I …?" does; the
# section that answers ("How to ask for a refund") does not say "want", "need" or "like".
_WISH = re.compile(r"^\s*(?:i|we)(?:'d|’d| would)?\s+(?:really\s+)?(?:want|need|like|wish)"
                   r"\s+(?:to|a|an|my|our)\b", re.I)
# Words that open a question (or a request: "tell me about …", "explain …"), not a problem told or a
# section named after its subject.
ASKING_WORDS = frozenset("how what what's whats why when where which who whom whose can could may do does did is are was "
                    "were will would should shall have has tell explain show describe list give any".split())
_OPPOSITE = {"on": "off", "off": "on", "up": "down", "down": "up", "in": "out", "out": "in"}
_FRAMING_TERMS = frozenset(terms(" ".join(FRAMING_WORDS)))
# "How do refunds work?" and "Does the app work offline?" ask about refunds and the app, and "How long
# do refunds take?" or "How often does sync run?" about a duration or a frequency: "work", "long",
# "take" and "run" frame the question, and an answer need not say them ("5 to 10 business days").
_DOES_IT_WORK = re.compile(r"^\s*(?:how\s+)?(?:do|does|did|would|will|can|could)\b.*\bwork(?:s|ed)?\b", re.I)
_HOW_LONG = re.compile(r"^\s*how (?:long|often|soon)\b", re.I)
# "What does E-SYNC-409 mean?" asks what it is, "How do I fix E-SYNC-413?" what to do about it, and
# "Where can I see my invoices?" or "Who can see my notes?" where they are and who has them: the section
# that answers need not say "mean", "fix" or "see". ("What happens …" is not one of them: "What happens next" names its own section.)
# Customers also name the code first ("E-SYNC-409 what does it mean") or ask for "the meaning of" it.
_WHAT_MEANS = re.compile(r"^\s*what (?:does|do|did|would)\b.*\bmean[\s?!.]*$|^.*\bwhat (?:does|do|did) (?:it|this|that|they)"
                         r" mean[\s?!.]*$|^.*\bmeaning of\b", re.I)
_HOW_TO_FIX = re.compile(r"^\s*how (?:do|can|should) (?:i|we|you)\s+(?:fix|solve|resolve|troubleshoot|get rid of)\b", re.I)
_WHERE_CAN = re.compile(r"^\s*(?:where (?:can|do|does|should|would|will) (?:i|we|you|one)|who (?:can|could|will|would))\b", re.I)
# "What's included in the free plan?" asks about the plan: its section lists, and need not say "include".
_WHAT_INCLUDED = re.compile(r"^\s*what(?:'s|\s+is|\s+are|\s+does|\s+do|\s+comes)?\b.*\b(?:includ\w*|come\w* with)\b", re.I)
# "Can I use the app offline?" asks whether the app works offline, and "How do I use tags?" about tags:
# the sentence that answers need not say "use" ("… make a whole notebook available offline").
_CAN_I_USE = re.compile(r"^\s*(?:(?:can|could|may) (?:i|we|you)|how (?:do|can|should) (?:i|we|you)) use\b", re.I)
# "How many devices can I use?" asks about devices: "use", "have", "get" and "need" only carry the question.
_HOW_MANY = re.compile(r"^\s*how many\b", re.I)
_HOW_MUCH = re.compile(r"^\s*how much\b", re.I)
# "What's the API rate limit on Team?" and "What is the price of Plus?" ask for an amount as "how much"
# does: "Team: 300 requests per minute", not "Above the limit the API answers with 429", which holds
# more of the question's words. Up to three words may stand between ("the largest attachment size").
_WHAT_AMOUNT = re.compile(r"^\s*(?:what(?:'s|’s|s|\s+is|\s+are|\s+was|\s+were)?)\s+(?:the\s+|my\s+|your\s+)?"
                          r"(?:[\w-]+\s+){0,3}?(?:limits?|prices?|pricing|costs?|fees?|sizes?|maximum|max|minimum|"
                          r"quotas?|capacity)\b", re.I)
# What kind of answer a question asks for, and how a sentence that gives one looks.
_UNIT = r"(?:second|minute|hour|day|week|month|year)s?"
_ANSWER_KINDS = (
    (re.compile(r"^\s*how often\b", re.I),
     re.compile(rf"\bevery\b|\bper {_UNIT}\b|\b(?:hourly|daily|weekly|monthly|yearly|annually)\b|"
                r"\b(?:once|twice|\d+ times) (?:a|an|per)\b", re.I)),
    (re.compile(r"^\s*how (?:long|soon)\b", re.I),  # "within 24 hours", not "3 exports a day"
     re.compile(r"\b(?:within|for|in|after|take|takes|took|up to|about|around|under|over|least|most|than)\s+"
                rf"(?:a|an|one|a few|\d+(?:\s*(?:-|–|to)\s*\d+)?)\s*(?:business |working |calendar )?{_UNIT}\b|"
                r"\bat once\b|\bright away\b|\bimmediately\b|\binstantly\b", re.I)),
    # "How many devices?" wants "2 devices" or "no device limit"; "How much is Team?" an amount, not "50% off".
    (_HOW_MANY,
     re.compile(r"\d|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|hundred|"
                r"thousand|dozen|unlimited|any number)\b|\bno (?:\w+ )?limits?\b", re.I)),
    (_HOW_MUCH,
     re.compile(r"[$€£¥]\s?\d|\d\s?(?:USD|EUR|GBP|KB|MB|GB|TB)\b|\b(?:for free|free of charge|no charge|unlimited)\b|"
                r"\bno (?:\w+ )?limits?\b", re.I)),
    # An amount with its unit: a price, a size, a rate ("300 requests per minute"); a bare number is
    # not one ("HTTP status 429").
    (_WHAT_AMOUNT,
     re.compile(r"[$€£¥]\s?\d|\d\s?(?:%|USD|EUR|GBP|KB|MB|GB|TB)\b|\b\d[\d,.]*\s+[a-z]+\s+(?:per|a|an|each)\s+"
                rf"(?:{_UNIT}|user|seat|token|workspace|device)s?\b|\bup to \d|\bunlimited\b|\bno (?:\w+ )?limits?\b",
                re.I)),
)
_WORK, _MEAN = frozenset(terms("work")), frozenset(terms("mean"))
_FIX = frozenset(terms("fix solve resolve troubleshoot rid"))
_SEE = frozenset(terms("see find view get look access"))
_INCLUDE = frozenset(terms("include includes included including come comes"))
_QUANTITY_VERBS = frozenset(terms("use have get need"))
_WISH_WORDS = frozenset(terms("want need like wish"))
_HOW_LONG_WORDS = frozenset(terms("long often soon take takes last lasts run runs happen happens occur occurs"))


def is_how_to(question: str) -> bool:
    """A "how do I …?" question ("How do I reset my password?"), or a wish that asks the same ("I want a
    refund"): its answer is a section's numbered steps."""
    return bool(_HOW_TO.match(question) or _WISH.match(question))


def is_problem(question: str) -> bool:
    """A problem told, not asked ("the app keeps crashing on my iphone", "sync is stuck"): no question
    word opens it and no question mark ends it. Its answer is what to do, as for "How do I …?"."""
    words = re.findall(r"[a-z']+", question.lower().replace("\u2019", "'"))  # a phone types "can’t"
    return bool(words) and "?" not in question and words[0] not in ASKING_WORDS and not _WISH.match(question)


def is_how(question: str) -> bool:
    """Any "how" question: it asks for steps, a duration, a frequency or how something works."""
    return bool(_HOW.match(question))


def answer_kind(question: str) -> re.Pattern[str] | None:
    """How a sentence that gives the kind of answer asked for looks ("every few seconds" to "how
    often"), or None when the question's form asks for no particular kind."""
    return next((looks for asks, looks in _ANSWER_KINDS if asks.match(question)), None)


def framing_of(question: str) -> frozenset[str]:
    """The question's terms that frame it rather than name what it asks about."""
    framing = _FRAMING_TERMS
    if _DOES_IT_WORK.match(question):
        framing |= _WORK
    if _HOW_LONG.match(question):
        framing |= _HOW_LONG_WORDS
    if _WISH.match(question):
        framing |= _WISH_WORDS
    if _HOW_MANY.match(question) or _HOW_MUCH.match(question) or _CAN_I_USE.match(question):
        framing |= _QUANTITY_VERBS
    for form, words in ((_WHAT_MEANS, _MEAN), (_HOW_TO_FIX, _FIX), (_WHERE_CAN, _SEE),
                        (_WHAT_INCLUDED, _INCLUDE)):
        if form.match(question):
            framing |= words
    return framing


def contradicts(question: str, heading: str) -> bool:
    """True when the heading has the opposite particle of one in the question and not that one
    ("turn off 2FA" against "Turning on 2FA"); the term sets drop both as stopwords."""
    asked, named = (set(re.findall(r"[a-z]+", text.lower())) for text in (question, heading))
    return any(_OPPOSITE[word] in named and word not in named for word in asked & _OPPOSITE.keys())
