"""Words that frame a question rather than name its subject.

"In what contexts is BERT mentioned?" is about BERT; "What references to alcohol are there?" about
alcohol; "How do the plans compare?" about the plans. The text that answers such a question rarely
repeats its framing words, and a knowledge base that lacks them gives them the highest idf, so they
would count against the question. They are left out of gate 1's lexical coverage and the keyword
rule's share (`rag.gate`) and of the words the offline answerer looks for (`gateway.offline.extractive`);
a question made only of them keeps them all.

Kept to words about documents and about comparing, which name no subject in any domain. On
2026-11-30 this let gate 1 through for 3 more of STICI's 79 answerable questions and no off-topic
one; adding generic nouns (option, form, kind, type, way, source) let through 2 more and one
off-topic question ("What forms of exercise did we do?" against the S10 manual): bench/README.md.
"""

from __future__ import annotations

FRAMING_WORDS = frozenset("""
    mention mentioned mentions refer reference references referenced context contexts
    say says said talk discuss describe explain tell information info detail details example examples
    topic topics article document text passage section page
    compare comparison difference differences differ similar versus
""".split())
