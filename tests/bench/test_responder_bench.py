"""The responder benchmark's rules for "the answer quotes the gold text" and "cites a chunk holding one"."""

from __future__ import annotations

from types import SimpleNamespace

from bench.responder import cites_gold_chunk, quotes

GOLD = "Refunds take 5 to 10 business days to appear on a card statement."


def test_an_answer_quotes_the_gold_when_it_holds_six_of_its_words_in_a_row() -> None:
    assert quotes("They take 5 to 10 business days to appear [1].", GOLD)  # "take 5 to 10 business days"
    assert quotes("REFUNDS   take 5 to\n10 business [2] days", GOLD)  # case, spacing and markers aside
    assert not quotes("Refunds take a week [1].", GOLD)
    assert not quotes("5 to 10 business days [1].", GOLD)  # five words in a row are not enough


def test_an_answer_quotes_a_gold_text_whose_source_has_markup() -> None:
    # The responder quotes what a reader sees; the gold text was copied from the Markdown source.
    gold = "They need **iOS or iPadOS 16** or newer, or **Android 10** or newer."
    assert quotes("They need iOS or iPadOS 16 or newer, or Android 10 or newer [1].", gold)


def test_a_short_gold_text_must_be_quoted_whole() -> None:
    assert quotes("Plus costs $6 per month [1].", "$6 per month")
    assert not quotes("Plus costs $6 [1].", "$6 per month")


def test_an_answer_cites_the_gold_chunk_when_a_marker_points_to_a_chunk_holding_a_gold_text() -> None:
    hits = [SimpleNamespace(text="## Speech\n\nConfigure your Text-to-speech (TTS) options.\n\n- Pitch: Set the pitch."),
            SimpleNamespace(text="## Keyboard\n\nAdjust the size of the keyboard.")]
    gold = ["configure your text-to-speech (tts) options"]
    assert cites_gold_chunk("Pitch: Set the pitch [1].", hits, gold)
    assert not cites_gold_chunk("Adjust the size of the keyboard [2].", hits, gold)
    assert not cites_gold_chunk("No marker at all.", hits, gold)
    assert not cites_gold_chunk("A marker past the hits [7].", hits, gold)


def test_the_help_center_sets_ask_the_demo_bot_about_the_demo_knowledge_base() -> None:
    from bench.data import HELP_CENTER, set_files
    from bench.responder import BOT, _bot

    docs, questions = set_files("help_center_holdout")
    assert docs == HELP_CENTER and questions.name == "holdout.jsonl" and questions.exists()
    assert set_files("help_center") == (HELP_CENTER, questions.with_name("questions.jsonl"))
    demo = _bot("help_center")
    # The demo's instructions (its product's name) and retrieval, with the benchmark's fallback marker.
    assert demo.name == "acme" and "Acme" in demo.system_prompt and demo.fallback_text == BOT.fallback_text
    assert _bot("s10") is BOT and set_files("s10")[0].name == "docs"
