"""Fences and tables nested in list items and quotes, HTML comments, data URIs, long words, titles."""

from __future__ import annotations

import base64
import random

import pytest

from rag.chunking import MAX_CHARS_PER_TOKEN, chunk_document
from rag.splitting import split_words

CODE = [f"echo 'step number {i} of the long installation script' && run_step --id {i}" for i in range(60)]
ROWS = [f"| item {i} | description of the item number {i} with some words | {i * 3} |" for i in range(80)]


def chunks_of(text, dense, *, title="Guide"):
    return chunk_document(
        text, fmt="markdown", title=title, bot="acme", source="docs", doc_id="guide.md",
        count_tokens=dense.count_tokens, max_tokens=256, text_tokens=512,
    )


def code_lines_in(chunks):
    return [line for c in chunks for line in c.text.splitlines() if line.lstrip().startswith("echo 'step")]


def assert_fences_closed(chunks):
    for chunk in chunks:
        fences = [line for line in chunk.text.splitlines() if line.lstrip(" >").startswith("```")]
        assert len(fences) % 2 == 0, chunk.text


def test_oversize_fence_in_a_list_item_is_cut_at_line_ends_and_rewrapped(dense):
    small = "2. Check it:\n\n   ```bash\n   tool --version\n   ```"
    doc = "# Setup\n\n1. Install the tool:\n\n   ```bash\n" + "\n".join("   " + line for line in CODE)
    doc += f"\n   ```\n\n{small}\n"
    chunks = chunks_of(doc, dense)
    assert_fences_closed(chunks)
    assert [line.strip() for line in code_lines_in(chunks)] == CODE  # every line whole, in order
    assert sum("```bash" in c.text for c in chunks) > 1  # it needed cutting
    assert all(dense.count_tokens(c.sparse_text) <= 512 for c in chunks)
    assert any(small in c.text for c in chunks)  # an item that fits stays as it was written
    assert "1. Install the tool:" in chunks[0].text


def test_oversize_table_in_a_quote_is_cut_between_rows_with_its_header(dense):
    doc = "# Stock\n\n> | name | desc | qty |\n> |---|---|---|\n" + "\n".join("> " + row for row in ROWS) + "\n"
    chunks = chunks_of(doc, dense)
    assert len(chunks) > 1
    for chunk in chunks:
        lines = chunk.text.splitlines()
        assert lines[:2] == ["| name | desc | qty |", "|---|---|---|"]
        assert all(line.startswith("| item ") and line.endswith("|") for line in lines[2:]), chunk.text
    assert [line for c in chunks for line in c.text.splitlines()[2:]] == ROWS


def test_fence_in_a_quote_in_a_list_item_keeps_its_lines(dense):
    quoted = "\n".join("  > " + line for line in CODE)
    doc = f"# Setup\n\n- Run this, as the admin said:\n\n  > ```sh\n{quoted}\n  > ```\n\n- Then log out.\n"
    chunks = chunks_of(doc, dense)
    assert_fences_closed(chunks)
    assert [line.strip(" >") for line in code_lines_in(chunks)] == CODE


def test_html_comments_are_not_indexed_but_code_keeps_them(dense):
    doc = (
        "# Pricing\n\n## Plans <!-- omit in toc -->\n\nThe pro plan costs 10 dollars.\n\n"
        "<!-- internal note: staff discount code STAFF50, do not publish -->\n\n"
        "The free plan <!-- STAFF60 --> costs nothing.\n\n"
        "- Refunds take five days. <!--\n  STAFF70 -->\n- <!-- STAFF80 -->\n\n"
        "Write `<!-- keep -->` in HTML.\n\n```html\n<!-- also kept -->\n```\n"
    )
    chunks = chunks_of(doc, dense)
    indexed = " ".join(c.sparse_text + " ".join(c.sentences) + " ".join(c.windows) for c in chunks)
    assert "STAFF" not in indexed and "internal note" not in indexed
    assert not [line for c in chunks for line in c.text.splitlines() if line.strip() == "-"]  # no empty item left
    assert {c.heading_path for c in chunks} == {("Pricing", "Plans")}
    assert "costs 10 dollars" in indexed and "Refunds take five days." in indexed
    assert "`<!-- keep -->`" in indexed and "<!-- also kept -->" in indexed


def test_base64_data_uri_images_are_dropped_and_their_alt_text_kept(dense):
    blob = base64.b64encode(random.Random(7).randbytes(20_000)).decode()
    doc = f"# Logo\n\nHere is the logo: ![company logo](data:image/png;base64,{blob})\n\nThe logo is blue.\n"
    chunks = chunks_of(doc, dense)
    assert len(chunks) == 1
    assert "base64" not in chunks[0].text and blob[:20] not in chunks[0].text
    assert "![company logo]" in chunks[0].text and "The logo is blue." in chunks[0].text


def test_split_words_cuts_a_long_word_in_linear_time(dense):
    word = base64.b64encode(random.Random(3).randbytes(15_000)).decode()  # 20k characters, no space
    counted = 0

    def size(piece: str) -> int:
        nonlocal counted
        counted += len(piece)
        return dense.count_tokens(piece) - 2

    pieces = split_words(word, budget=200, size=size)
    # Counting the rest of the word at every cut read 80x its length here; each cut now reads a window.
    assert counted < 30 * len(word)
    assert "".join(pieces) == word and all(dense.count_tokens(p) - 2 <= 200 for p in pieces)
    assert min(dense.count_tokens(p) - 2 for p in pieces[:-1]) > 150  # pieces are filled, not halved


def test_split_words_keeps_the_words_before_a_long_word_before_it(dense):
    word = "ab." * 1000  # 2000 tokens with no space
    pieces = split_words(f"before {word} after", budget=50, size=lambda p: dense.count_tokens(p) - 2)
    assert pieces[0] == "before" and " ".join(pieces).replace(" ", "") == f"before{word}after"


def test_first_heading_follows_commonmark():
    from rag.blocks import first_heading

    fenced = "Use this script.\n\n```bash\n# reset the password\nacme reset\n```\n\n# Troubleshooting\n\nAsk.\n"
    assert first_heading(fenced) == "Troubleshooting"
    assert first_heading("## Install\n\nRun it.\n\n# Later\n") == "Later"  # level 1 only
    assert first_heading("## Install\n\nRun it.\n") is None
    assert first_heading("#hashtag #support\n\nNo heading here.\n") is None
    assert first_heading("#release\n\nWalrus Care\n===========\n\n# Later\n") == "Walrus Care"
    assert first_heading("# Pricing <!-- draft -->\n") == "Pricing"


def test_heading_path_is_the_words_a_reader_sees(dense):
    text = "# **Acme** `sync` [guide](https://acme.example/sync) <span>v2</span>\n\nRun `acme sync`.\n"
    [chunk] = chunk_document(text, fmt="markdown", title="file", bot="b", source="s", doc_id="d",
                             count_tokens=dense.count_tokens)
    assert chunk.heading_path == ("Acme sync guide v2",)
    assert chunk.embed_text.startswith("Acme sync guide v2\n\n")


@pytest.mark.parametrize("text", [
    "x" * 100_000,  # one 'word' over 100 characters is a single [UNK] to WordPiece
    "ภาษาไทยเป็นภาษาที่สวยงามมาก " * 2000,  # a script the vocabulary lacks: a word is one [UNK]
])
def test_a_chunk_is_bounded_in_characters_even_where_the_tokenizer_sees_one_token(dense, text):
    chunks = chunk_document(f"# Notes\n\n{text}", fmt="markdown", title="t", bot="b", source="s", doc_id="d",
                            count_tokens=dense.count_tokens, max_tokens=256, text_tokens=512)
    assert len(chunks) > 5
    assert max(len(c.text) for c in chunks) <= 512 * MAX_CHARS_PER_TOKEN
    assert "".join("".join(c.text.split()) for c in chunks) == "".join(text.split())  # nothing lost


def test_a_document_of_headings_only_is_indexed_as_its_outline(dense):
    # It gave no chunk at all: the contact page vanished from the knowledge base without an error.
    [chunk] = chunks_of("# Contact\n\n## Phone: 555-0100\n\n## Email: help@acme.example\n", dense, title="Contact")
    assert chunk.text == "Contact\nPhone: 555-0100\nEmail: help@acme.example"
    assert chunks_of("", dense) == [] and chunks_of("   \n", dense) == []
