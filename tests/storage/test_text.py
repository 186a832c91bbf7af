"""The one rule for text both stores can hold."""

from __future__ import annotations

from storage.text import storable_text


def test_nul_is_dropped_and_each_lone_surrogate_is_one_replacement_character() -> None:
    assert storable_text("a\x00b \ud800 c\udfff 😀") == "ab \ufffd c\ufffd 😀"
    plain = "nothing to clean, café"
    assert storable_text(plain) is plain


def test_an_emoji_split_into_its_two_surrogates_is_joined_again():
    assert storable_text("Enjoy \ud83d" + "\ude00!") == "Enjoy 😀!"


def test_storable_json_cleans_every_string_keys_included():
    from storage.text import storable_json

    assert storable_json({"a\x00": ["x\x00y", {"k": "\udc80"}, 3, None]}) == {"a": ["xy", {"k": "\ufffd"}, 3, None]}
