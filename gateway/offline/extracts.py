"""Reading the system prompt back: its numbered extracts as quotable sentences, and its fallback text.

Also the term analysis the scoring shares: lower-cased content words, stopwords removed, light stemming.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import NamedTuple

from gateway.pipeline.links import MARKDOWN_LINK
from gateway.pipeline.prompts import EXTRACT_TAG, FALLBACK_TAG
from rag.tables import table_rows

DEFAULT_FALLBACK = "I don't know the answer to that."
MAX_LIST_CHARS = 400  # a sentence ending in ":" takes its list along only if the two stay readable

_EXTRACT = re.compile(rf"<{EXTRACT_TAG}\s+([^>]*)>\n?(.*?)\n?</{EXTRACT_TAG}>", re.S)
_ATTR = re.compile(r'(\w+)="([^"]*)"')
_FALLBACK = re.compile(rf"<{FALLBACK_TAG}>(.*?)</{FALLBACK_TAG}>", re.S)
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
# Help centers write "turn on" and "sign in"; customers ask "enable" and "log in". Each phrase of a
# pair becomes one word, so either spelling finds the other (the particles alone are stopwords).
_SYNONYMS = tuple((re.compile(pattern), word) for pattern, word in (
    (r"\b(?:turn|switch)(?:s|ed|ing)? off\b|\bdisabl\w*|\bdeactivat\w*", " disable "),
    (r"\b(?:turn|switch)(?:s|ed|ing)? on\b|\benabl\w*|\bactivat\w*", " enable "),
    (r"\b(?:log|sign)(?:s|ged|ed|ging|ing)?[ -]?out\b", " signout "),
    (r"\b(?:log|sign)(?:s|ged|ed|ging|ing)?[ -]?in\b|\blogins?\b|\bsignins?\b", " signin "),
))
# Both patterns start only where a word (or an address) starts, and never give back what a run
# consumed: unanchored, each scanned a long run of letters from every position in it (quadratic:
# 16,000 letters took 14 s, holding the event loop).
_HYPHENATED = re.compile(r"(?<![^\W_])[^\W_]++(?:-[^\W_]++)+", re.UNICODE)
# A sentence ends at ". ", "! ", "? " (and Arabic "؟ ", Urdu "۔ ", Hindi "। ") before what starts one
# (`_starts_sentence`), and at a CJK full stop, which no space follows.
_SENTENCE_END = re.compile(r"(?<=[.!?…؟۔।॥])\s+|(?:(?<=[。！？])|(?<=[。！？][”’」』）]))(?=[^\s”’」』）。！？])")
_OPENERS = "\"'([¿¡«"
# Chinese and Japanese put no spaces between words: such a sentence is long enough by its characters.
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_ITEM = re.compile(r"^\s*(?:[-*+]\s+|(?P<step>\d+[.)])\s+)")  # a numbered item is one step of a procedure
_TERMINAL = re.compile(r"[.!?:;…؟۔।॥。！？：；][\"')\]*_”’」』）]*$")
# Words a sentence cannot end on: an extract whose last words are these was cut by the chunker.
_DANGLING = frozenset(
    """a an the and or but nor of to in on at by for from with without per as than into onto via see
    your our their its his her my this that these those is are was were be can will would should may""".split()
)
# A sentence that opens with a pronoun is about what the sentence before it names.
PRONOUN = re.compile(r"^(?:it|its|they|their|this|these|that|those|he|she)\b", re.I)
# Addresses are not words: "support@acme.example" must not match a question about support.
_ADDRESS = re.compile(r"(?<![\w.+-])[\w.+-]++@[\w-]++(?:\.[\w-]++)+|(?<![\w.+-])[a-z][a-z0-9+.-]*+://\S+"
                      r"|(?<![\w.-])(?:[a-z0-9-]++\.)+[a-z]{2,}(?:/\S*)?")
_MD_PREFIX = re.compile(r"^\s*(?:#{1,6}\s+|[-*+]\s+|\d+[.)]\s+|>\s*)+")
_STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing don down during each few for from further get got had
    has have having he her here hers herself him himself his how i if in into is it its itself just let me
    more most my myself no nor not now of off on once only or other our ours ourselves out over own please
    same she should so some such than that the their theirs them themselves then there these they this
    those through to too under until up very was we were what when where which while who whom why will
    with would you your yours yourself yourselves tell know want need like also one us may might must
    shall thing things way much many""".split()
    # Courtesies name no subject: "thanks, what about my refund?" matched a passage's "Thank you."
    + """thanks thank thx ty ok okay cheers hi hello hey""".split()
)


# A customer writes "I forgot my passphrase", the page "If you forget the passphrase": the past forms
# of the verbs a help center uses, which no suffix rule reaches.
_IRREGULAR = {
    "forgot": "forget", "forgotten": "forget", "paid": "pay", "lost": "lose", "sent": "send", "took": "take",
    "taken": "take", "bought": "buy", "chose": "choose", "chosen": "choose", "wrote": "write",
    "written": "write", "made": "make", "broke": "break", "broken": "break", "stole": "steal",
    "stolen": "steal", "saw": "see", "seen": "see", "gave": "give", "given": "give", "came": "come",
    "ran": "run", "began": "begin", "begun": "begin", "kept": "keep", "sold": "sell", "froze": "freeze",
    "frozen": "freeze", "shown": "show", "hidden": "hide", "hid": "hide", "understood": "understand",
}


def stem(word: str) -> str:
    """A deliberately light stemmer: enough to match refund/refunds/refunded, charge/charges, and the
    past forms in `_IRREGULAR` (forgot/forget, paid/pay)."""
    word = _IRREGULAR.get(word, word)
    for suffix, repl, min_len in (("ies", "y", 5), ("sses", "ss", 6), ("ing", "", 6), ("ed", "", 5),
                                  ("ly", "", 5), ("s", "", 4)):
        if word.endswith(suffix) and len(word) >= min_len and not word.endswith("ss"):
            word = word[: len(word) - len(suffix)] + repl
            if suffix in ("ing", "ed") and len(word) > 3 and word[-1] == word[-2] and word[-1] not in "lsz":
                word = word[:-1]  # resetting -> reset, planned -> plan
            break
    return word[:-1] if len(word) > 4 and word.endswith("e") else word


def terms(text: str) -> set[str]:
    """Content terms of a text: lower-cased words minus stopwords, stemmed; emails and URLs are skipped.
    A hyphenated word also counts joined ("non-profits" is "nonprofits" too, "e-mail" is "email")."""
    text = _ADDRESS.sub(" ", text.lower())
    for phrase, word in _SYNONYMS:
        text = phrase.sub(word, text)
    words = _WORD.findall(text) + [w.replace("-", "") for w in _HYPHENATED.findall(text)]
    found = {stem(w) for w in words if w not in _STOPWORDS and len(w) > 1 and not _CJK.search(w)}
    # Chinese and Japanese write words without spaces: "重置密码" is one run. Its character pairs are its terms,
    # so "如何重置密码" finds "可以在登录页面重置" and "忘记了密码".
    for run in _CJK_RUN.findall(text):
        found.update(run[i:i + 2] for i in range(max(1, len(run) - 1)))
    return found


@dataclass(frozen=True, slots=True)
class Sentence:
    """One quotable sentence of an extract, with where it sits."""

    text: str
    block: int  # the paragraph or list item it came from: a pronoun refers back within it
    heading: str | None  # the heading above it inside the extract, if the extract holds one
    step: bool = False  # it sits in a numbered list item


@dataclass(frozen=True, slots=True)
class Extract:
    """One numbered extract parsed back from the system prompt."""

    n: int
    heading_terms: frozenset[str]
    sentences: tuple[str, ...]
    # Per sentence: the terms of the title and of the heading it sits under, when the extract itself
    # holds a heading (a chunk may span sections: "## Plus … ## Team"); else None (use heading_terms).
    section_terms: tuple[frozenset[str] | None, ...] = ()
    # Per sentence: its block number and the name of the section it sits in ("Plus" for "Plans > Plus").
    blocks: tuple[int, ...] = ()
    subjects: tuple[str, ...] = ()
    steps: tuple[bool, ...] = ()  # per sentence: it sits in a numbered list item


@dataclass(frozen=True, slots=True)
class Candidate:
    """A sentence being scored, with the terms of its text and of the section it sits in."""

    extract: Extract
    pos: int
    terms: set[str]
    referent: frozenset[str] = frozenset()  # what a leading pronoun stands for (`gateway.offline.extractive`)

    @property
    def text(self) -> str:
        """The sentence."""
        return self.extract.sentences[self.pos]

    @property
    def section(self) -> frozenset[str]:
        """The terms of its title and heading."""
        e, i = self.extract, self.pos
        own = e.section_terms[i] if i < len(e.section_terms) else None
        return e.heading_terms if own is None else own

    @property
    def key(self) -> tuple[int, int]:
        """Which extract and where in it."""
        return (self.extract.n, self.pos)


def parse_extracts(system: str) -> list[Extract]:
    """The numbered extracts of a system prompt built by `gateway.pipeline.prompts`."""
    out = []
    for match in _EXTRACT.finditer(system):
        attrs = {k: html.unescape(v) for k, v in _ATTR.findall(match.group(1))}
        if not attrs.get("n", "").isdigit():
            continue
        title, heading = attrs.get("title", ""), attrs.get("heading", "")
        section = heading.split(" > ")[-1].strip() or title
        units = sentence_units(html.unescape(match.group(2)))
        out.append(Extract(
            int(attrs["n"]), frozenset(terms(f"{title} {heading}")), tuple(u.text for u in units),
            tuple(None if u.heading is None else frozenset(terms(f"{title} {u.heading}")) for u in units),
            tuple(u.block for u in units), tuple(u.heading or section for u in units),
            tuple(u.step for u in units),
        ))
    return out


def parse_fallback(system: str) -> str:
    """The bot's fallback text, as the rules embed it."""
    match = _FALLBACK.search(system)
    return html.unescape(match.group(1)).strip() if match else DEFAULT_FALLBACK


def split_sentences(text: str) -> list[str]:
    """Whole sentences of an extract, Markdown stripped.

    Lines are joined into their paragraph or list item first (Markdown wraps sentences across
    lines), then split into sentences. Dropped: headings, table rows, code fences, and the
    fragments a chunk boundary leaves: a paragraph that starts mid-sentence (lower-case) loses its
    first piece, and a last piece without closing punctuation is kept only in a list item that
    does not stop on a word that needs a continuation ("per", "the", "with", ...). A sentence that
    introduces a list ("We accept:") takes the list's items along, or is dropped if they are missing.
    """
    return [u.text for u in sentence_units(text)]


def sentence_units(text: str) -> list[Sentence]:
    """`split_sentences` as `Sentence` records."""
    cleaned: list[_Piece] = []
    for block in _blocks(text):
        plain = MARKDOWN_LINK.sub(r"\1", _MD_PREFIX.sub("", block.text)).replace("**", "").replace("`", "").strip()
        if block.is_row:  # a row is one statement, whatever punctuation its cells hold
            cleaned.append(_Piece([plain if _TERMINAL.search(plain) else f"{plain}."], block))
            continue
        pieces = [p.strip() for p in _split(plain) if p.strip()]
        if pieces and not block.is_item and not _starts_sentence(pieces[0], openers="¿¡"):
            pieces = pieces[1:]  # starts mid-sentence: the chunk began after the sentence did
        if pieces and not _TERMINAL.search(pieces[-1]) and (not block.is_item or _cut_short(pieces[-1])):
            pieces = pieces[:-1]  # stops mid-sentence: the chunk ended before the sentence did
        cleaned.append(_Piece(pieces, block))
    out: list[Sentence] = []
    absorbed: set[int] = set()
    for b, (pieces, block) in enumerate(cleaned):
        if b in absorbed:
            continue
        if pieces and pieces[-1].endswith(":"):
            # "Data is stored in one of two regions:" says nothing without the list that follows.
            items = []
            for k in range(b + 1, len(cleaned)):
                item = cleaned[k].block
                if not item.is_item or item.is_row or item.heading != block.heading or not cleaned[k].pieces \
                        or (block.is_step and item.is_step):
                    break  # a step's list ends at the next step ("3. Choose a format: …" then "4. …")
                items.append(k)
            listed = "; ".join(" ".join(cleaned[k].pieces).rstrip(".;,") for k in items)
            if items and len(pieces[-1]) + len(listed) <= MAX_LIST_CHARS:
                pieces = pieces[:-1] + [f"{pieces[-1]} {listed}."]
                absorbed.update(items)
            else:
                pieces = pieces[:-1]
        out.extend(Sentence(p, b, block.heading, block.is_step) for p in pieces
                   if len(p.split()) >= 3 or len(_CJK.findall(p)) >= 4)
    return out


def _starts_sentence(text: str, openers: str = _OPENERS) -> bool:
    """True when `text` starts as a sentence does: a capital or a digit, or a letter of a script without
    case (Arabic, Hindi, Chinese), after at most one of `openers` (a quote, a bracket, "¿"). A lower-case
    start is the rest of a sentence. Only capitals counted: an Arabic, Hindi or Chinese help center had
    every paragraph dropped as "starts mid-sentence", and the offline model never answered from it."""
    first = text[1:2] if text[:1] in openers else text[:1]
    return first.isupper() or first.isdigit() or (first.isalpha() and not first.islower())


def _split(plain: str) -> list[str]:
    """`plain` cut into sentences at each `_SENTENCE_END` that a sentence start follows."""
    pieces, start = [], 0
    for match in _SENTENCE_END.finditer(plain):
        if not match.group() or _starts_sentence(plain[match.end():]):  # a CJK stop ends one whatever follows
            pieces.append(plain[start:match.start()])
            start = match.end()
    return pieces + [plain[start:]]


class _Block(NamedTuple):
    """A paragraph, list item or table row, with its wrapped lines joined."""

    text: str
    is_item: bool
    heading: str | None  # the heading above it
    is_step: bool  # a numbered list item
    is_row: bool = False  # a table row, read as "Header: cell; Header: cell"


class _Piece(NamedTuple):
    """A block's sentences, trimmed where the chunk cut one."""

    pieces: list[str]
    block: _Block


def _blocks(text: str) -> list[_Block]:
    """Paragraphs, list items and table rows, in order (code left out)."""
    blocks: list[_Block] = []
    current: list[str] = []
    is_item = is_step = False
    in_code = False
    heading: str | None = None

    table: list[str] = []

    def flush() -> None:
        nonlocal current, is_item, is_step
        if current:
            blocks.append(_Block(" ".join(current), is_item, heading, is_step))
        current, is_item, is_step = [], False, False
        if table:
            blocks.extend(_Block(row, True, heading, False, is_row=True) for row in table_rows(table))
            table.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if not in_code and stripped.startswith("|"):
            if not table:
                flush()
            table.append(stripped)
            continue
        if stripped.startswith("```"):
            in_code = not in_code
            flush()
            continue
        if not in_code and stripped.startswith("#"):
            flush()
            heading = stripped.lstrip("#").strip()
            continue
        if in_code or not stripped:
            flush()
            continue
        if table:
            flush()  # the table ended
        if item := _ITEM.match(line):
            flush()
            is_item, is_step = True, item.group("step") is not None
        current.append(stripped)
    flush()
    return blocks


def _cut_short(piece: str) -> bool:
    words = piece.lower().rstrip(",;").split()
    return piece.rstrip().endswith((",", ";", "(", "-", "–")) or (bool(words) and words[-1] in _DANGLING)

