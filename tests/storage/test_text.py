"""The one rule for text both stores can hold."""

from __future__ import annotations

from storage.text import storable_text


def test_nul_is_dropped_and_each_lone_surrogate_is_one_replacement_character() -> None:
    assert storable_text("a\x00b \ud800 c\udfff 😀") == "ab \ufffd c\ufffd 😀"
    plain = "nothing to clean, café"
    assert storable_text(plain) is plain
