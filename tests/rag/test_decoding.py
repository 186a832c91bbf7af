"""rag.decoding on labels that lie: the bytes say what they are when a charset label cannot be so."""

from __future__ import annotations

import pytest

from rag.decoding import decode_text


@pytest.mark.parametrize("declaration", ['<meta charset="utf-16">', '<?xml version="1.0" encoding="UTF-16"?>'])
def test_markup_declaring_utf16_in_bytes_legible_as_ascii_reads_as_utf8(declaration):
    # Word's "Save as Web Page" declares UTF-16; a copy re-saved as UTF-8 kept it, and read as CJK garbage.
    page = f"{declaration}<html><body><p>Caf\u00e9 hours: nine to five.</p></body></html>"
    assert decode_text(page.encode("utf-8"), markup=True) == page

    # A server's Content-Type charset=utf-16 over the same bytes: no NUL byte, so no UTF-16 either.
    assert decode_text(page.encode("utf-8"), declared="UTF-16", markup=True) == page
    assert decode_text(b"Opening hours: nine to five.", declared="utf-16le") == "Opening hours: nine to five."


@pytest.mark.parametrize("label", ["iso-8859-1", "windows-1252", "iso-8859-15"])
def test_utf8_under_a_stale_legacy_label_reads_as_utf8(label):
    # A template's old <meta charset>, a server's default charset=ISO-8859-1: "Café" was read "CafÃ©".
    page = f'<html><head><meta charset="{label}"></head><body><p>Café crème brûlée</p></body></html>'
    assert decode_text(page.encode("utf-8"), markup=True) == page
    assert decode_text("Café crème".encode("utf-8"), declared=label) == "Café crème"
