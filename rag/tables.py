"""Markdown table rows read with their header: "Label; Header: cell; Header: cell".

Why: a row alone ("| Largest attachment | 25 MB | 250 MB | 1 GB |") does not say whose each cell is;
"Largest attachment; Free: 25 MB; Plus: 250 MB; Team: 1 GB" does. Ingest embeds each row so, as one of
its chunk's sentences (`rag.chunking.split_sentences`, through `text_and_tables`), and the offline
responder quotes rows so (`gateway.offline.extracts`, which finds the tables in its own block reader).
"""

from __future__ import annotations

import re

_CELL_BREAK = re.compile(r"(?<!\\)\|")


def table_rows(lines: list[str]) -> list[str]:
    """A Markdown table's body rows as "Header: cell; Header: cell" (cells alone without a header row,
    or under an empty header cell, such as a first column of row labels)."""
    rows = [[cell.strip() for cell in _CELL_BREAK.split(line.strip().strip("|"))] for line in lines]
    header: list[str] = []
    if len(rows) >= 2 and all(set(cell) <= set("-: ") and cell for cell in rows[1]):
        header, rows = rows[0], rows[2:]
    out = []
    for cells in rows:
        pairs = [f"{name}: {cell}" if name else cell for name, cell in zip(header or [""] * len(cells), cells) if cell]
        if pairs:
            out.append("; ".join(pairs))
    return out


def text_and_tables(text: str) -> list[str | list[str]]:
    """`text` cut at its Markdown tables (runs of lines that start with "|", outside code fences): the
    text between them as strings, each table as the list of its rows read with their header."""
    if "|" not in text:
        return [text]
    out: list[str | list[str]] = []
    lines: list[str] = []
    table: list[str] = []
    in_code = False
    for line in text.split("\n"):
        stripped = line.strip()
        if not in_code and stripped.startswith("|"):
            if lines:
                out.append("\n".join(lines))
                lines = []
            table.append(stripped)
            continue
        if table:
            out.append(table_rows(table))
            table = []
        if stripped.startswith(("```", "~~~")):
            in_code = not in_code
        lines.append(line)
    if table:
        out.append(table_rows(table))
    if lines:
        out.append("\n".join(lines))
    return out
