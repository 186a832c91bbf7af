"""Greetings, thanks and a plain "yes": answered without a search or a model call.

"hi" or "thanks!" is not a question. Searched for, it finds nothing, so the customer would get the
fallback text ("I couldn't find that…") and the turn would count towards the unanswered-turns
escalation: "hi", "thanks", "ok bye" would page an operator. Only a message that is nothing but
small talk is caught: "Hi, how do I reset my password?" goes through the pipeline as usual.

A bare "yes" or "no" means what the bot's last reply makes it mean (`gateway.pipeline.core`): after a
fallback text that offers a person ("Would you like me to get a person from our team?"), "yes" is the
customer accepting; after another question of the bot's it is an answer for the model, with the
history; after a statement it only closes the turn. Searched for, "yes please" finds table cells that
say "yes".
"""

from __future__ import annotations

import re
from typing import Literal

MAX_SMALL_TALK_CHARS = 60

# A few words of Spanish, French, German, Italian and Portuguese, in the forms customers use most: a
# lone "gracias" was known, "muchas gracias" and "buenos días" were searched and got the fallback text.
_GREETING = (r"(?:hi|hello|hey|hiya|howdy|good (?:morning|afternoon|evening|day)|greetings|"
             r"hallo|hola|bonjour|bonsoir|ciao|salut|ola|buen[oa]s(?: d[ií]as| tardes| noches)?|"
             r"buongiorno|buonasera|guten (?:morgen|tag|abend)|bom dia|boa (?:tarde|noite))")
_THANKS = (r"(?:thanks?(?: you)?(?: (?:so|very) much| a lot| again)?|thx|ty|cheers|(?:much )?appreciated|"
           r"appreciate it|bye|goodbye|bye bye|see you|have a (?:good|nice|great) (?:day|one)|"
           r"merci(?: beaucoup)?|(?:muchas )?gracias|(?:vielen )?dank|danke(?: sch[öo]n)?|grazie(?: mille)?|"
           r"(?:muito )?obrigad[oa]|adi[oó]s|hasta luego|au revoir|tsch[üu]ss|arrivederci|tchau)")
# "ok", "great, got it": an acknowledgement closes a turn the way thanks do.
_ACK = r"(?:ok|okay|alright|all right|great|perfect|awesome|cool|nice|got it|understood|that helps|that helped)"
_FILLER = rf"(?:{_ACK}|yes|yeah|no|nope|there|all|everyone|team|bot|folks)"
_SMALL_TALK = re.compile(rf"(?:{_FILLER} )*(?:{_GREETING}|{_THANKS})(?: (?:{_FILLER}|{_GREETING}|{_THANKS}))*"
                         rf"|{_ACK}(?: {_ACK})*")
_THANKS_ONLY = re.compile(rf"\b{_THANKS}\b")
_GREETING_ONLY = re.compile(rf"\b{_GREETING}\b")
_NOT_A_WORD = re.compile(r"[^\w\s]+|_")

# "ok thanks" after an offer is a polite no as often as a yes, so "ok" says yes only alone or with "sure".
# The yes and no of Spanish, German, French and Portuguese too: a Spanish bot's "¿Quieres que te atienda una
# persona?" answered "Sí, por favor" went to the search, and the customer got the fallback text again.
_YES = re.compile(r"(?:(?:oh |ok |okay )?(?:yes|yeah|yep|yup|sure|please|y|si|sí|claro|vale|oui|ja|gerne|sim|"
                  r"por favor|bitte)"
                  r"(?: (?:please|sure|yes|thanks|thank you|do|please do|go ahead|that would be great|"
                  r"por favor|gracias|que s[ií]|claro|bitte|gerne|danke|merci|s il vous pla[iî]t|obrigad[oa]))*"
                  r"|ok(?:ay)?(?: (?:sure|please|go ahead|please do))?|please do|go ahead|do it|that would be great)")

_NO = re.compile(r"(?:no|nope|nah|not now|nein|non|n[ãa]o|no (?:that s all|that s it|i m good|i m fine|all good|need))"
                 r"(?: (?:thanks|thank you|gracias|danke|merci|obrigad[oa]))?|that s all|that s it|nothing else")

# A thumbs-up or a folded-hands emoji alone is how many customers say "ok" or "thanks" on a phone. With
# its words stripped it was nothing: searched, it got the fallback text and counted as an unanswered turn,
# so three thumbs-up paged an operator. Only these, alone (a skin tone or presentation selector allowed):
# "😍" or "✋💪" says nothing here. The first ones also say yes to an offer of a person.
_YES_EMOJI = "👍👌✅✔☑🆗"
_ACK_EMOJI = _YES_EMOJI + "🙏🙂😊👏🤝💯❤♥"
# A wave is how many customers open a WhatsApp chat: searched, "👋" got "I couldn't find that".
_GREETING_EMOJI = "👋🙋"


def _only_emoji(text: str, emoji: str) -> bool:
    # A skin tone, a presentation selector, or a gender sign joined on (🙋‍♀️).
    return re.fullmatch(rf"(?:[{emoji}][\U0001F3FB-\U0001F3FF\uFE0F]*(?:\u200d[♀♂]\uFE0F?)?\s*)+",
                        text.strip()) is not None


SmallTalk = Literal["greeting", "thanks"]


def small_talk(text: str) -> SmallTalk | None:
    """The kind of small talk a message is: "greeting" for "Hi there!", "thanks" for "ok, thanks a lot 🙏",
    "bye", "great, got it" or a thumbs-up alone ("greeting" for a wave), None for anything else."""
    if len(text) > MAX_SMALL_TALK_CHARS:
        return None
    if _only_emoji(text, _ACK_EMOJI):
        return "thanks"
    if _only_emoji(text, _GREETING_EMOJI):
        return "greeting"
    words = " ".join(_NOT_A_WORD.sub(" ", text.lower()).split())
    if not words or not _SMALL_TALK.fullmatch(words):
        return None
    return "greeting" if _GREETING_ONLY.search(words) and not _THANKS_ONLY.search(words) else "thanks"


def is_yes(text: str) -> bool:
    """True for a message that only says yes: "yes", "Yes please!", "sure, go ahead", "👍"."""
    words = " ".join(_NOT_A_WORD.sub(" ", text.lower()).split())
    return len(text) <= MAX_SMALL_TALK_CHARS and (bool(_YES.fullmatch(words)) or _only_emoji(text, _YES_EMOJI))


_LEADING_YES = re.compile(r"(?:oh |ok |okay )?(?:yes|yeah|yep|yup|sure|ok|okay|s[ií]|claro|vale|ja|oui|sim)\b")
_DECLINE = re.compile(r"\b(?:not|no|don t|do not|never|later|nunca|m[aá]s tarde|luego|nein|nicht|kein\w*|sp[äa]ter|"
                      r"pas|plus tard|n[ãa]o|depois)\b")


def starts_with_yes(text: str) -> bool:
    """True for a short reply that opens with yes and asks nothing: "Yes, a person would be great".
    Only an answer to the bot's offer of a person reads it as yes (`is_yes` is for any question)."""
    words = " ".join(_NOT_A_WORD.sub(" ", text.lower()).split())
    return (len(text) <= MAX_SMALL_TALK_CHARS and "?" not in text and bool(_LEADING_YES.match(words))
            and not _DECLINE.search(words))


def is_no(text: str) -> bool:
    """True for a message that only says no: "no", "Nope.", "no, that's all"."""
    words = " ".join(_NOT_A_WORD.sub(" ", text.lower()).split())
    return len(text) <= MAX_SMALL_TALK_CHARS and bool(_NO.fullmatch(words))
