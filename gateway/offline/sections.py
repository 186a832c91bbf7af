"""Answers made of a whole section: the numbered steps of the section a how-to question is named after
(or of retrieval's first passage, when the best sentence is a remark elsewhere), or the opening of the
section any other question is named after.

Why apart from sentence scoring (`gateway.offline.extractive`): these answers are found by the section's name,
not by the sentences' words, since steps and openings rarely repeat the question ("Go to Settings →
Security" answers "How do I turn on 2FA?").
"""

from __future__ import annotations

from gateway.offline.extracts import PRONOUN, Candidate, Extract, terms
from gateway.offline.question_form import contradicts, is_how, is_how_to, is_problem

# How much an answer quotes, a whole section or the best sentences alike.
MAX_SENTENCES = 3
MAX_ANSWER_CHARS = 700


def whole_section(in_order: list[Candidate], named: set[str], question: str) -> list[tuple[int, str]]:
    """A section that answers the question as a whole: the steps of the one a how-to question is named
    after, else the opening of the one the question is named after. A "how long / often / does it
    work" question asks for a detail of its section, not its opening."""
    if is_how_to(question) and (steps := _procedure(in_order, named, question)):
        return steps
    if is_how_to(question) or not is_how(question):
        return _section_opening(in_order, named, question)
    return []


def _procedure(candidates: list[Candidate], wanted: set[str], question: str) -> list[tuple[int, str]]:
    """The steps of the first section (best sentence's first, then in retrieval order) whose title and
    heading name every word of a how-to question; else none. Why: the steps of "Turning on 2FA" may
    hold none of the question's words ("Go to Settings → Security"), while a side remark in another
    section ("support can never turn off 2FA") holds them all and would be the best sentence."""
    tried: set[tuple[int, str]] = set()
    for c in candidates:
        section = (c.extract.n, section_of(c.extract, c.pos))
        if section in tried:
            continue  # every sentence of a section leads to the same steps
        tried.add(section)
        if steps := _steps(c, wanted, question):
            return steps
    return []


def first_passage_steps(best: Candidate, candidates: list[Candidate], named: set[str],
                        question: str) -> list[tuple[int, str]]:
    """The steps of retrieval's first extract, for a how-to question or a problem told ("sync is stuck")
    whose best-scoring sentence (`best`) is no step and sits in a later extract, when that first
    extract's section names a word of the question; else none. Why: "How do I change my password?"
    shares both its words with a remark in an error section ("your password was changed on another
    device") and one with "Resetting a forgotten password", which retrieval ranked first on more than
    words; the remark is no way to do it. (`_procedure` needs a section named after every word.)"""
    if not (is_how_to(question) or is_problem(question)) or best.extract.n == 1 or is_step(best):
        return []
    for c in candidates:
        if c.extract.n != 1:
            break
        name = section_of(c.extract, c.pos)
        if named & terms(name) and not contradicts(question, name) and len(steps := steps_of(c)) > 1:
            return steps
    return []


def _section_opening(candidates: list[Candidate], wanted: set[str], question: str) -> list[tuple[int, str]]:
    """The first sentences of the first section whose own heading names a word of the question and
    whose title and heading name all of them ("What are your support hours?" → "Support hours");
    else none. Why: such a question asks for the section as a whole, and its opening answers it
    ("Monday to Friday, 08:00 to 20:00") while holding none of the question's words; the sentence
    that does ("messages sent outside these hours…") is a side remark."""
    tried: set[tuple[int, str]] = set()
    for c in candidates:
        e, name = c.extract, section_of(c.extract, c.pos)
        if (e.n, name) in tried:
            continue
        tried.add((e.n, name))
        if not wanted <= c.section or not wanted & terms(name) or contradicts(question, name):
            continue
        out: list[tuple[int, str]] = []
        length = 0
        for i, text in enumerate(e.sentences):
            if section_of(e, i) != name:
                continue
            if len(out) >= MAX_SENTENCES or length + len(text) > MAX_ANSWER_CHARS:
                break
            if not out and PRONOUN.match(text):
                text = f"{name}: {text}"  # "Plus: It costs $6 per month"
            out.append((e.n, text))
            length += len(text)
        if out:
            return out
    return []


def _steps(best: Candidate, wanted: set[str], question: str) -> list[tuple[int, str]]:
    """The numbered steps of the best sentence's section, when its title and heading name every word
    of a how-to question ("Resetting a forgotten password") and do not flip one of its particles
    ("turn off" is not "Turning on", though both particles are stopwords); else none. Why: steps
    rarely repeat the question's words ("Choose Forgot password?"), so a side remark in the same
    section that does ("Resetting your password signs you out") would be quoted instead."""
    if not wanted <= best.section or contradicts(question, section_of(best.extract, best.pos)):
        return []
    return steps_of(best, anywhere=True)


def steps_of(c: Candidate, *, anywhere: bool = False) -> list[tuple[int, str]]:
    """The numbered steps of `c`'s section, when `c` is one of them (or `anywhere` in the section) and
    there are at least two; else none."""
    e = c.extract
    section = section_of(e, c.pos)
    if not anywhere and not is_step(c):
        return []
    picked = [i for i, numbered in enumerate(e.steps) if numbered and section_of(e, i) == section]
    if len({e.blocks[i] for i in picked}) < 2:
        return []  # one numbered item is not a procedure
    out: list[tuple[int, str]] = []
    length = 0
    for i in picked:
        length += len(e.sentences[i])
        if length > MAX_ANSWER_CHARS:
            break
        out.append((e.n, e.sentences[i]))
    return out


def is_step(c: Candidate) -> bool:
    """The sentence sits in a numbered list item."""
    return c.pos < len(c.extract.steps) and c.extract.steps[c.pos]


def section_of(e: Extract, i: int) -> str:
    """The name of the section sentence `i` of `e` sits in."""
    return e.subjects[i] if i < len(e.subjects) else ""
