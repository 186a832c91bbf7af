"""How gate 2 cuts an answer into sentences (`gateway.pipeline.sentences`)."""

from __future__ import annotations

import pytest

from gateway.pipeline.sentences import keep_sentences, split_sentences


@pytest.mark.parametrize("text", ["To reset:\n\n1. Open Settings [1].\n2. Tap Reset.\n\nDone.", "A. \nB! C? d", "",
                                  "one", "5.", "Steps: 1. Open it. 2. Close it.", "a\n\n\nb", "Plus costs $6.50. Yes.",
                                  "退款[1]。请付款。", "他说：“好的。”然后走了。", "हाँ [1]। नहीं।"])
def test_the_sentences_join_back_into_the_text(text: str) -> None:
    assert "".join(sentence + after for sentence, after in split_sentences(text)) == text


def test_a_list_number_starts_its_items_sentence_and_a_line_break_ends_one() -> None:
    assert split_sentences("1. Open Settings.\n2. Tap Reset\n- Confirm") == [
        ("1. Open Settings.", "\n"), ("2. Tap Reset", "\n"), ("- Confirm", "")]
    assert split_sentences("Plus costs $6.50 a month. Pro costs more!") == [
        ("Plus costs $6.50 a month.", " "), ("Pro costs more!", "")]


def test_a_dropped_sentence_leaves_its_paragraph_break() -> None:
    assert keep_sentences("A.\n\nB. C.\n\nD.", lambda s: s != "C.") == "A.\n\nB.\n\nD."
    assert keep_sentences("A. B.\nC.", lambda s: s == "B.") == "B."
    assert keep_sentences("A. B.", lambda s: False) == ""


def test_an_abbreviation_ends_no_sentence() -> None:
    """Split at "i.e." and "Mr.", dropping the sentence with an unknown link left "…our agent, i.e. Mr." (review)."""
    text = "Send it to our agent, i.e. Mr. Smith, at https://x.example/card [1]. Plans renew monthly [2]."
    assert [s for s, _ in split_sentences(text)] == [
        "Send it to our agent, i.e. Mr. Smith, at https://x.example/card [1].", "Plans renew monthly [2]."]
    assert [s for s, _ in split_sentences("Extras, e.g. a phone [7]. Etc. and more.")] == [
        "Extras, e.g. a phone [7].", "Etc. and more."]


def test_chinese_hindi_and_arabic_sentences_end_at_their_own_stops() -> None:
    """A Chinese or Hindi answer was one sentence, so gate 2 dropped all of it for one unknown link."""
    assert split_sentences("退款在5个工作日内到账[1]。请在网站付款！他说：“好的。”然后走了。") == [
        ("退款在5个工作日内到账[1]。", ""), ("请在网站付款！", ""), ("他说：“好的。”", ""), ("然后走了。", "")]
    assert split_sentences("रिफंड 5 दिनों में आता है [1]। भुगतान करें।") == [
        ("रिफंड 5 दिनों में आता है [1]।", " "), ("भुगतान करें।", "")]
    assert split_sentences("هل دفعت؟ نعم [1].") == [("هل دفعت؟", " "), ("نعم [1].", "")]


def test_a_month_abbreviation_ends_no_sentence() -> None:
    """"It arrives on Nov. 28." was two sentences, "It arrives on Nov." and "28.": gate 2 kept the first and
    dropped the second, which held no word, and the customer read "It arrives on Nov."."""
    assert [s for s, _ in split_sentences("It arrives on Nov. 28. Your tracking is 1Z999 [1].")] == [
        "It arrives on Nov. 28.", "Your tracking is 1Z999 [1]."]


@pytest.mark.parametrize(("text", "sentences"), [
    ("Ihre Bestellung kommt am 28. November an. Danke!", ["Ihre Bestellung kommt am 28. November an.", "Danke!"]),
    ("Sie wurde am 2. Dezember 2026 versandt.", ["Sie wurde am 2. Dezember 2026 versandt."]),
    ("Sie kommt am 3. Mai. Danke!", ["Sie kommt am 3. Mai.", "Danke!"]),
    ("Sie kam am 3. März an.", ["Sie kam am 3. März an."]),
    ("Plus costs 6. May I help?", ["Plus costs 6.", "May I help?"]),  # "May" starts a sentence
    ("Step 3. Open Settings.", ["Step 3.", "Open Settings."]),
])
def test_a_days_ordinal_dot_before_a_month_ends_no_sentence(text: str, sentences: list[str]) -> None:
    """"am 28. November" was cut in two: "…am 28." and "November an.", neither a date."""
    assert [sentence for sentence, _ in split_sentences(text)] == sentences
