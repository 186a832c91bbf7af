"""What the directory loader makes of markup: Markdown front matter (its title, left out of the text) and
HTML tables (whether the first row is their header, so each row is read with it)."""

from __future__ import annotations

import pytest

from rag.sources import load_directory


async def test_hugo_toml_front_matter_and_a_folded_yaml_title_give_the_title_and_are_not_indexed(tmp_path):
    """TOML front matter was indexed as the first paragraph; a folded `title: >-` titled the page ">-"."""
    (tmp_path / "toml.md").write_text('+++\ntitle = "Returns policy"\ndraft = false\n+++\n\nReturns are free.\n')
    (tmp_path / "folded.md").write_bytes(b"---\r\ntitle: >-\r\n  Shipping to the EU\r\n  and the UK\r\ntags: [eu]\r\n---\r\n"
                                         b"Shipping takes a week.\r\n")
    docs = {d.doc_id: d for d in (await load_directory(tmp_path)).documents}
    assert (docs["toml.md"].title, docs["toml.md"].text.strip()) == ("Returns policy", "Returns are free.")
    assert (docs["folded.md"].title, docs["folded.md"].text.strip()) == ("Shipping to the EU and the UK", "Shipping takes a week.")


@pytest.mark.parametrize("line, title", [('title = "Returns policy" # shown in the menu', "Returns policy"),
                                         ("title = 'Returns # policy' # literal", "Returns # policy"),
                                         ('title = "Say \\"hi\\""', 'Say "hi"')])
async def test_a_hugo_toml_title_is_read_as_toml_without_its_comment(tmp_path, line, title):
    """`title = "X" # comment` titled the page `X" # comment`, in every chunk's heading path."""
    (tmp_path / "page.md").write_text(f"+++\n{line}\n+++\n\nReturns are free.\n")
    (doc,) = (await load_directory(tmp_path)).documents
    assert doc.title == title


@pytest.mark.parametrize("line, title", [('title: "Returns policy" # shown in the menu', "Returns policy"),
                                         ("title: Returns policy # shown in the menu", "Returns policy"),
                                         ("title: 'It''s free'", "It's free"), ("title: C# basics", "C# basics"),
                                         ("title: Q&A: billing", "Q&A: billing"), ("title: Yes", "Yes")])
async def test_a_yaml_title_is_read_as_yaml_without_its_comment(tmp_path, line, title):
    """`title: "X" # comment` titled the page `X" # comment`; what YAML cannot read is taken as written."""
    (tmp_path / "page.md").write_text(f"---\n{line}\n---\n\nReturns are free.\n")
    (doc,) = (await load_directory(tmp_path)).documents
    assert doc.title == title


def _chunk(doc):
    from rag.chunking import chunk_document

    [chunk] = chunk_document(doc.text, fmt="html", title=doc.title, bot="b", source="s", doc_id=doc.doc_id,
                             count_tokens=lambda text: len(text.split()), max_tokens=256, text_tokens=512)
    return chunk


@pytest.mark.parametrize("header", ["<thead><tr><td>Plan</td><td>Price</td></tr></thead>",
                                    "<tr><td><b>Plan</b></td><td><strong>Price</strong></td></tr>"])
async def test_an_html_table_without_th_cells_is_a_table_whose_rows_read_with_their_header(tmp_path, header):
    """Word's and most CMSs' tables have no <th>: trafilatura wrote them without a delimiter row, so Markdown
    read one paragraph of pipes, and the chunker's sentences held no row at all."""
    (tmp_path / "plans.html").write_text(
        f"<html><body><main><h1>Plans</h1><p>How our plans compare for every customer.</p><table>{header}"
        "<tr><td>Plus</td><td>$12</td></tr><tr><td>Team</td><td>$20</td></tr></table></main></body></html>")
    [doc] = (await load_directory(tmp_path)).documents
    assert [s.replace("*", "") for s in _chunk(doc).sentences[-2:]] == ["Plan: Plus; Price: $12", "Plan: Team; Price: $20"]


@pytest.mark.parametrize("table", [
    # a first row of data: "Monday: Tuesday; 9:00 to 17:00: 9:00 to 18:00" gave Monday as Tuesday's name
    "<tr><td>Monday</td><td>9:00 to 17:00 at the front desk</td></tr><tr><td>Tuesday</td><td>9:00 to 18:00 at the front desk</td></tr>",
    # a layout table: its paragraphs were joined by colons into one sentence
    "<tr><td><p>Our store opens at nine every morning.</p></td><td><p>Write to us for repairs and questions.</p></td></tr>"
    "<tr><td><p>Returns are accepted within thirty days.</p></td><td><p>Shipping is free on larger orders.</p></td></tr>",
])
async def test_an_html_table_whose_first_row_is_no_header_keeps_its_rows_apart(tmp_path, table):
    (tmp_path / "hours.html").write_text(
        f"<html><body><main><h1>Hours</h1><p>When and how to reach the store.</p><table>{table}</table></main></body></html>")
    [doc] = (await load_directory(tmp_path)).documents
    rows = ["; ".join(cell.split("</p>")[0].split(">")[-1] for cell in row.split("</td>")[:-1]) for row in table.split("</tr>")[:-1]]
    assert _chunk(doc).sentences[-2:] == tuple(rows)


@pytest.mark.parametrize("rows", [
    [("Colour", "Red"), ("Size", "42 EU"), ("Weight", "2 kg")],  # a product's key/value table
    [("Plan", "Price"), ("Plus", "$12"), ("Team", "$20")],  # the same shape: only markup can tell a header
])
async def test_a_two_column_table_of_labels_and_values_has_no_header_without_markup(tmp_path, rows):
    """A key/value table's first row was read as its header over a column of figures: "Colour: Size;
    Red: 42 EU", a sentence the page never says."""
    cells = "".join(f"<tr><td>{label}</td><td>{value}</td></tr>" for label, value in rows)
    (tmp_path / "item.html").write_text("<html><body><main><h1>Walking boots</h1><p>Everything about our walking "
                                        f"boots for every season.</p><table>{cells}</table></main></body></html>")
    [doc] = (await load_directory(tmp_path)).documents
    assert "---" not in doc.text and not any(f"{rows[0][0]}:" in s for s in _chunk(doc).sentences)


async def test_a_table_of_more_columns_gets_its_first_row_as_header_over_columns_of_figures(tmp_path):
    (tmp_path / "plans.html").write_text(
        "<html><body><main><h1>Plans</h1><p>How our plans compare for every customer.</p><table><tr><td>Plan</td>"
        "<td>Price</td><td>Seats</td></tr><tr><td>Plus</td><td>$12</td><td>5</td></tr><tr><td>Team</td><td>$20</td>"
        "<td>25</td></tr></table></main></body></html>")
    [doc] = (await load_directory(tmp_path)).documents
    assert _chunk(doc).sentences[-2:] == ("Plan: Plus; Price: $12; Seats: 5", "Plan: Team; Price: $20; Seats: 25")


async def test_an_html_tables_thead_of_td_cells_is_its_header_whatever_its_cells_hold(tmp_path):
    (tmp_path / "contacts.html").write_text(
        "<html><body><main><h1>Contacts</h1><p>Who to ask about what, by topic.</p><table><thead><tr><td>Topic</td>"
        "<td>Contact person</td></tr></thead><tbody><tr><td>Billing</td><td>Ana Ruiz</td></tr></tbody></table></main></body></html>")
    [doc] = (await load_directory(tmp_path)).documents
    assert _chunk(doc).sentences[-1] == "Topic: Billing; Contact person: Ana Ruiz"
