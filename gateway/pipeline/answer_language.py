"""Which language gate 2 reads an answer's sentence in: the turn's reply language (the bot's
`replies.lang`), not a guess from the sentence's words.

A sentence read as English must say what the tools returned in words the results hold; one in another
language, whose words no English result holds, is grounded by an identifier, a date, an amount or a state
word of the results instead. Guessed from the sentence alone, a short English claim with no "the" or "is"
("Order A-1042: free upgrade included!") read as another language and passed on its identifier.

The model answers in the customer's language, which may not be the bot's: a sentence in another language
shows it (a letter English does not write, or a word of Spanish, German, French, Portuguese or Italian that
English has not), and is read in that language whatever the reply language. Where no reply language is
known, the sentence's own words decide, as before: one without a common English word is taken for another
language.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")
# Words that say a sentence is English when no reply language is known.
_ENGLISH = frozenset({"the", "is", "are", "your", "you", "for", "to", "of", "and", "with", "it", "this", "that",
                      "at", "be", "been", "were", "its", "it's"})
# Frequent words of the other languages an answer is likely in, that English does not write.
_OTHER = frozenset((
    "el un una unos unas está están estar hemos fue sido ser su sus tu tus usted pedido pedidos para por pero "
    "sí muy ya todavía aún también que qué cuando der die das dem des ein eine einen einem einer und oder ist "
    "sind wurde wurden wird werden haben ihr ihre ihren ihrem dein deine sie wir für nicht noch schon bereits "
    "auch bis zum zur vom beim auf nach bei über les une sont été votre vos avec pour pas déjà aussi nous "
    "vous elle uma são foi seu sua você já não gli è sono stato suo vostro già anche"
).split())
# A letter no English word has: an accent, an umlaut, another script (not an emoji or a currency sign).
_NOT_ENGLISH_LETTER = re.compile(r"[^\W\d_a-zA-Z]")
# A capitalised word: a name, which an English sentence writes as it is ("Hi José", "to Zürich"). With its
# accent read as another language, "Hi José, order A-1042: free upgrade included!" passed on its identifier.
_NAME_OR_WORD = re.compile(r"\w+")


def _without_names(sentence: str) -> str:
    """`sentence` without its capitalised words in Latin letters (a Russian sentence's "Ваш" stays)."""
    return _NAME_OR_WORD.sub(lambda word: "" if word.group()[0].isupper() and max(word.group()) <= "\u024f"
                             else word.group(), sentence)


def is_english(tag: str | None) -> bool:
    """Whether the BCP 47 `tag` is English ("en", "en-GB")."""
    return bool(tag) and tag.split("-", 1)[0].lower() == "en"


def in_english(sentence: str, reply_lang: str | None = None) -> bool:
    """Whether gate 2 reads `sentence` as English: in an English reply, unless the sentence shows another
    language; in a reply in another language, when the sentence shows English words; with no reply
    language known, when it holds a common English word."""
    words = [w.lower() for w in _WORD.findall(sentence.replace("\u2019", "'"))]
    if not is_english(reply_lang):
        return not _ENGLISH.isdisjoint(words)
    return _OTHER.isdisjoint(words) and not _NOT_ENGLISH_LETTER.search(_without_names(sentence))
