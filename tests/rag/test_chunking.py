"""Structure-aware chunking: fences and table rows stay whole, headings steer chunks, limits hold."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag.chunking import _fit_head, chunk_document
from rag.model_files import ENCODER_MAX_TOKENS
from rag.splitting import split_words

LONG_FENCE = "```python\n" + "\n".join(f"value_{i} = compute(alpha, beta, gamma, {i})" for i in range(90)) + "\n```"
SMALL_FENCE = "```bash\npip install gateway\ngateway serve --port 8000\n```"
TABLE_ROWS = [f"| Plan{i} | {i * 10} USD | note about plan {i} and its limits |" for i in range(70)]
TABLE = "| Plan | Price | Notes |\n|---|---|---|\n" + "\n".join(TABLE_ROWS)
DOC = f"""# Handbook

Welcome to the handbook.

## Install

Install with:

{SMALL_FENCE}

{LONG_FENCE}

## Pricing

{TABLE}

### Refunds

Refunds take five days.

- Card payments are refunded to the card.
- Bank transfers are refunded by transfer.
"""


def chunks_of(text, dense, *, fmt="markdown", title="Handbook", doc_id="handbook.md", max_tokens=256, text_tokens=None):
    return chunk_document(
        text, fmt=fmt, title=title, bot="acme", source="docs", doc_id=doc_id,
        count_tokens=dense.count_tokens, max_tokens=max_tokens, text_tokens=text_tokens,
    )


def test_chunk_code_fence_never_split(dense):
    chunks = chunks_of(DOC, dense)
    for chunk in chunks:
        fence_lines = [line for line in chunk.text.splitlines() if line.startswith("```")]
        assert len(fence_lines) % 2 == 0, chunk.text  # every opened fence is closed in the same chunk
    assert any(SMALL_FENCE in c.text for c in chunks)
    code_lines = [line for line in LONG_FENCE.splitlines()[1:-1]]
    found = [line for c in chunks for line in c.text.splitlines() if line.startswith("value_")]
    assert found == code_lines  # all lines, in order, none cut
    assert sum(1 for c in chunks if "value_0 =" in c.text or "value_89 =" in c.text) >= 1
    assert len({c.chunk_id for c in chunks if "value_" in c.text}) > 1  # the long fence needed splitting


def test_chunk_table_rows_never_split(dense):
    chunks = chunks_of(DOC, dense)
    table_chunks = [c for c in chunks if "| Plan" in c.text]
    assert len(table_chunks) > 1
    rows_seen = []
    for chunk in table_chunks:
        lines = chunk.text.splitlines()
        assert lines[0] == "| Plan | Price | Notes |"  # header repeated on every piece
        for line in lines[2:]:
            assert line in TABLE_ROWS
            rows_seen.append(line)
    assert rows_seen == TABLE_ROWS


def test_chunk_heading_path_and_new_chunk_per_section(dense):
    chunks = chunks_of(DOC, dense)
    paths = {c.heading_path for c in chunks}
    assert ("Handbook", "Pricing", "Refunds") in paths
    refunds = [c for c in chunks if c.heading_path == ("Handbook", "Pricing", "Refunds")]
    assert len(refunds) == 1 and "Card payments" in refunds[0].text and "| Plan" not in refunds[0].text
    assert refunds[0].embed_text.startswith("Handbook > Pricing > Refunds\n\n")
    intro = [c for c in chunks if "Welcome" in c.text]
    assert intro[0].heading_path == ("Handbook",) and "Install" not in intro[0].text


def test_chunk_title_is_root_when_document_has_no_h1(dense):
    chunks = chunks_of("## Setup\n\nRun the installer.\n", dense, title="Guide")
    assert chunks[0].heading_path == ("Guide", "Setup")


def test_chunk_overlap_at_most_one_block_never_across_heading(dense):
    paragraphs = [f"Paragraph {i}: " + "the service keeps working while we upgrade it " * 6 for i in range(12)]
    text = "# A\n\n" + "\n\n".join(paragraphs[:8]) + "\n\n# B\n\n" + "\n\n".join(paragraphs[8:])
    chunks = chunks_of(text, dense, max_tokens=128)
    for before, after in zip(chunks, chunks[1:]):
        shared = set(before.text.split("\n\n")) & set(after.text.split("\n\n"))
        assert len(shared) <= 1
        if before.heading_path != after.heading_path:
            assert not shared
    assert all(("Paragraph 8:" in c.text) == (c.heading_path == ("B",)) for c in chunks if "Paragraph 8:" in c.text)


def test_chunk_plain_text_splits_paragraphs_at_blank_lines(dense):
    text = "First paragraph line one\nline two.\n\nSecond paragraph.\n\n\nThird."
    chunks = chunks_of(text, dense, fmt="text", title="notes")
    assert len(chunks) == 1
    assert chunks[0].text == "First paragraph line one\nline two.\n\nSecond paragraph.\n\nThird."
    assert chunks[0].heading_path == ("notes",)


def test_chunk_ids_stable_across_reingest_and_sensitive_to_content(dense):
    first = [c.chunk_id for c in chunks_of(DOC, dense)]
    second = [c.chunk_id for c in chunks_of(DOC, dense)]
    assert first == second and len(set(first)) == len(first)
    changed = [c.chunk_id for c in chunks_of(DOC.replace("five days", "ten days"), dense)]
    assert len(set(first) - set(changed)) == 1  # only the edited chunk gets a new id
    other_doc = [c.chunk_id for c in chunks_of(DOC, dense, doc_id="other.md")]
    assert not set(first) & set(other_doc)


def test_chunk_oversize_paragraph_and_long_word_fit_the_encoder(dense):
    text = ("word " * 2000) + "x" * 3000 + " " + "Sentence one. " * 300
    for fmt in ("text", "markdown"):
        chunks = chunks_of(text, dense, fmt=fmt)
        assert len(chunks) > 5
        assert max(dense.count_tokens(c.embed_text) for c in chunks) <= ENCODER_MAX_TOKENS


def test_split_words_sums_word_counts_and_still_fits_a_counter_that_is_not_additive(dense):
    words = " ".join(f"word{i} alpha-beta" for i in range(300))
    pieces = split_words(words, budget=50, size=lambda p: dense.count_tokens(p) - 2)
    assert " ".join(pieces) == words and all(dense.count_tokens(p) - 2 <= 50 for p in pieces)
    assert dense.count_tokens(pieces[0]) - 2 > 45  # packed, not one word per piece
    # Characters are not additive over words (the spaces count too): the exact cut takes over.
    pieces = split_words("aa " * 20, budget=8, size=len)
    assert pieces and all(len(p) <= 8 for p in pieces) and " ".join(pieces).split() == ["aa"] * 20


@pytest.mark.parametrize("prefix", ["", "Guide > Setup"])
def test_fit_head_takes_the_longest_start_that_fits_with_summed_or_exact_counts(dense, prefix):
    body = " ".join(f"Step {i} connects unit-{i} to port {i}." for i in range(80))

    def fits(head: str, count) -> bool:
        return count(f"{prefix}\n\n{head}" if prefix else head) <= 100

    def next_word_end(head: str) -> int:
        rest = body[len(head):].lstrip()
        return len(body) - len(rest) + len(rest.split()[0])

    # A word-piece counter: the summed word counts find the cut.
    head = _fit_head(body, prefix=prefix, count_tokens=dense.count_tokens, max_tokens=100)
    assert body.startswith(head) and fits(head, dense.count_tokens)
    assert not fits(body[: next_word_end(head)], dense.count_tokens)
    # Characters do not add up over words (the spaces count too): the binary search answers.
    head = _fit_head(body, prefix=prefix, count_tokens=len, max_tokens=100)
    assert body.startswith(head) and fits(head, len) and not fits(body[: next_word_end(head)], len)


def test_chunk_document_counts_each_distinct_text_once(dense):
    counted: list[str] = []

    def count(text: str) -> int:
        counted.append(text)
        return dense.count_tokens(text)

    text = "# Guide\n\n" + "\n\n".join(f"Step {i} connects the unit to port {i} and waits. " * 12 for i in range(20))
    chunks = chunk_document(text, fmt="markdown", title="Guide", bot="b", source="s", doc_id="d", count_tokens=count, max_tokens=128, text_tokens=384)
    assert chunks and len(counted) == len(set(counted))


_word = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=30)
_line = st.lists(_word, min_size=1, max_size=60).map(" ".join)
_block = st.one_of(
    _line,
    st.lists(_line, min_size=1, max_size=40).map(lambda ls: "```\n" + "\n".join(ls) + "\n```"),
    st.lists(_line, min_size=1, max_size=30).map(lambda ls: "| a | b |\n|---|---|\n" + "\n".join(f"| {x} | y |" for x in ls)),
    st.lists(_line, min_size=1, max_size=8).map(lambda ls: "\n".join(f"- {x}" for x in ls)),
    st.tuples(st.integers(1, 4), _line).map(lambda t: "#" * t[0] + " " + t[1]),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(blocks=st.lists(_block, min_size=1, max_size=12), budget=st.sampled_from([64, 256]), text_tokens=st.sampled_from([None, 384]))
def test_chunk_embedded_text_never_exceeds_encoder_limit(dense, blocks, budget, text_tokens):
    text = "\n\n".join(blocks)
    for fmt in ("markdown", "text"):
        for chunk in chunks_of(text, dense, fmt=fmt, title="A fairly long document title", max_tokens=budget, text_tokens=text_tokens):
            assert max(dense.count_tokens(w) for w in chunk.windows) <= budget
            assert chunk.text.strip()
            assert dense.count_tokens(chunk.sparse_text) <= max(budget, text_tokens or budget)


def test_chunk_text_may_exceed_encoder_while_embedded_start_fits(dense):
    text = "# Guide\n\n## Setup\n\n" + "\n\n".join(f"Step {i} connects the unit to port {i} and waits." for i in range(60))
    chunks = chunks_of(text, dense, max_tokens=128, text_tokens=384)
    long = [c for c in chunks if dense.count_tokens(c.sparse_text) > 128]
    assert long, "the text budget allows chunks longer than the encoder limit"
    for c in chunks:
        assert dense.count_tokens(c.embed_text) <= 128
        assert c.embed_text.startswith("Guide > Setup\n\n")
        assert c.sparse_text == "Guide > Setup\n\n" + c.text  # BM25 sees every word
        head = c.embed_text.removeprefix("Guide > Setup\n\n")
        assert c.text.startswith(head) and len(head) > 0
        assert c.windows[0] == c.embed_text and all(dense.count_tokens(w) <= 128 for w in c.windows)
    assert any(len(c.windows) > 1 for c in long)  # the tail is embedded too, in its own windows
    assert len(chunks) < len(chunks_of(text, dense, max_tokens=128))  # fewer, larger chunks
