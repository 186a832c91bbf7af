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
`HAPPEN_WORDS` were added for gate 1 on 2026-12-03: "What happens when I hit the rate limit?" was
refused by the sample help center, which answers it; every quality cell of the benchmark stayed the
same but STICI's MRR (0.659 → 0.661, the coverage prior), and so did an 85-question eval of that help
center (bench/data/help_center).
"""

from __future__ import annotations

FRAMING_WORDS = frozenset("""
    mention mentioned mentions refer reference references referenced context contexts
    say says said talk discuss describe explain tell information info detail details example examples
    topic topics article document text passage section page
    compare comparison difference differences differ similar versus
""".split())

HAPPEN_WORDS = frozenset("happen happens happened happening".split())
"""The verb of "What happens if/when …", which frames the question in every domain. Left out of gate 1's
coverage only: the offline answerer keeps it, since a section called "What happens next" answers
"What happens next?" by name (`gateway.offline.question_form`)."""

GATE_FRAMING_WORDS = FRAMING_WORDS | HAPPEN_WORDS
"""What gate 1 (`rag.search`, `rag.gate`) leaves out of the coverage and the keyword rule's share."""
