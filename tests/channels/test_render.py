"""The shared splitter and citation footers: examples, properties (hypothesis), and naughty strings."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from channels.citations import render_citations
from channels.render import split_text, text_length, utf16_len
from gateway.models import Citation

BLNS = Path(__file__).resolve().parents[1] / "fixtures" / "badinput" / "blns.json"
_FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,})[^\n]*$", re.MULTILINE)
_URL = re.compile(r"https?://\S+")


def _content(text: str) -> str:
    """What must survive a split: everything but whitespace and the fence lines, emphasis and code marks a split
    may add."""
    return re.sub(r"[\s*_~`]+", "", _FENCE_LINE.sub("", text))


def _fence_lines(part: str) -> int:
    return len(_FENCE_LINE.findall(part))


# -- examples ---------------------------------------------------------------------------------


def test_split_text_short_text_is_one_part_unchanged() -> None:
    assert split_text("Hello *world*\n\nBye.", limit=100) == ["Hello *world*\n\nBye."]


def test_split_text_blank_text_gives_no_parts() -> None:
    assert split_text("", limit=10) == []
    assert split_text(" \n\n ", limit=10) == []


def test_split_text_rejects_non_positive_limit() -> None:
    with pytest.raises(ValueError):
        split_text("abc", limit=0)


def test_split_text_prefers_paragraph_boundaries() -> None:
    first = "First paragraph. " * 3
    second = "Second paragraph here. " * 3
    parts = split_text(f"{first.strip()}\n\n{second.strip()}", limit=80)
    assert parts == [first.strip(), second.strip()]


def test_split_text_falls_back_to_lines_then_sentences_then_words() -> None:
    lines = "\n".join(f"line number {i}" for i in range(10))
    assert all("\n" not in p or p.count("line") > 1 for p in split_text(lines, limit=40))
    assert split_text(lines, limit=40)[0] == "line number 0\nline number 1"
    sentences = "One two three. Four five six. Seven eight nine."
    assert split_text(sentences, limit=32) == ["One two three. Four five six.", "Seven eight nine."]
    words = "alpha beta gamma delta epsilon"
    assert split_text(words, limit=12) == ["alpha beta", "gamma delta", "epsilon"]


@pytest.mark.parametrize("sentence", [
    "هل يمكنني تغيير كلمة المرور الخاصة بي الآن؟",  # Arabic question mark
    "یہ ایک لمبا جملہ ہے اور اس میں بہت سے الفاظ ہیں۔",  # Urdu full stop
    "यह वाक्य बहुत लंबा है और इसमें कई शब्द हैं।",  # Devanagari danda
], ids=["arabic", "urdu", "hindi"])
def test_split_text_cuts_arabic_urdu_and_hindi_text_between_sentences(sentence: str) -> None:
    """Only Latin and CJK sentence ends were known: a long Arabic or Hindi answer was cut between words."""
    text = " ".join([sentence] * 40)
    parts = split_text(text, limit=500, unit="utf16")
    assert len(parts) > 2 and all(utf16_len(p) <= 500 for p in parts)
    assert all(p.endswith(sentence) and p.startswith(sentence) for p in parts)


def test_a_code_block_that_ends_inside_the_limit_keeps_its_closing_line_whole() -> None:
    # Found by the property below: room for an added closer was reserved before looking for a cut, so
    # the part ended inside the block's own closing line, and the customer got "``" and then "`".
    text = "```\n\n\n\n\n" + "0" * 29 + "\n```\n\n0."
    parts = split_text(text, limit=40)
    assert parts[1:] == ["```\n" + "0" * 29 + "\n```", "0."]
    assert all(_fence_lines(p) % 2 == 0 for p in parts)


def test_split_text_ignores_an_early_paragraph_break_in_favour_of_a_full_part() -> None:
    text = "Hi.\n\n" + " ".join(f"w{i}" for i in range(40))
    parts = split_text(text, limit=60)
    assert len(parts[0]) > 30  # not just "Hi."
    assert _content("\n".join(parts)) == _content(text)


def test_split_text_never_cuts_inside_a_url() -> None:
    url = "https://example.com/docs/a-long-path/with-many-segments?query=value&other=thing"
    text = ("word " * 12) + url + (" tail" * 12)
    for limit in range(len(url), len(url) + 40, 3):
        parts = split_text(text, limit=limit)
        assert sum(url in p for p in parts) == 1, limit
        assert all(len(p) <= limit for p in parts)


def test_split_text_keeps_markdown_link_whole() -> None:
    link = "[the refund policy page](https://example.com/refunds)"
    text = "Read " * 8 + link + " now" * 8
    parts = split_text(text, limit=70)
    assert sum(link in p for p in parts) == 1


def test_split_text_keeps_a_slack_link_with_a_label_of_many_words_whole() -> None:
    """Its label was cut at a space: Slack showed `<https://x.io/r|The refund` and `policy. Page>` as text."""
    link = "<https://example.com/refunds|The refund policy. Page for all plans>"
    text = "Read " * 8 + link + " now" * 8
    for limit in range(len(link), len(link) + 40, 3):
        parts = split_text(text, limit=limit)
        assert sum(link in p for p in parts) == 1, limit


@pytest.mark.parametrize("bold", ["**Important: back up first. Then reset the app.**",
                                  "*Important: back up first. Then reset the app.*"])
def test_split_text_keeps_a_bold_run_whole(bold: str) -> None:
    """Cut between its sentences, Telegram showed "**Important: back up first." and "Then reset the app.**"."""
    text = "Intro words here. " * 5 + bold + " After that, sign in again." + " More text follows." * 5
    for limit in range(len(bold) + 10, len(bold) + 80, 7):
        parts = split_text(text, limit=limit)
        assert sum(bold in p for p in parts) == 1, limit


def test_split_text_keeps_a_bold_run_longer_than_600_characters_whole() -> None:
    """Emphasis was matched within 600 characters only, so a longer run was cut and showed its marks as typed."""
    bold = "**" + " ".join(["This is an important sentence."] * 30) + "**"
    text = "Intro words here. " * 20 + bold + " After that, sign in again."
    assert sum(bold in p for p in split_text(text, limit=len(bold) + 40)) == 1


@pytest.mark.parametrize("mark", ["**", "*", "_", "~", "***", "___"])
def test_split_text_closes_and_reopens_a_run_longer_than_the_limit(mark: str) -> None:
    """A run longer than a part was cut anyway: '**This is…sentence.' then 'This is…sentence.**', marks as typed."""
    body = " ".join(["This is an important sentence."] * 60)
    parts = split_text(f"Note: {mark}{body}{mark} Done.", limit=500)
    assert len(parts) >= 4 and all(len(p) <= 500 for p in parts)
    assert parts[0].startswith(f"Note: {mark}This") and parts[0].endswith(f"sentence.{mark}")
    assert all(p.startswith(f"{mark}This") and p.endswith(f"sentence.{mark}") for p in parts[1:-1])
    assert parts[-1].startswith(f"{mark}This") and parts[-1].endswith(f"sentence.{mark} Done.")
    assert re.sub(r"\s+", " ", " ".join(p.strip("*_~ ") for p in parts)).count("important") == 60


def test_split_text_closes_and_reopens_a_code_span_and_a_links_text_longer_than_the_limit() -> None:
    """Cut as typed, one part showed "`This is…" and "[This is…", the next "…sentence.`" and "…](https://…)"."""
    body = " ".join(["This is an important sentence."] * 60)
    code = split_text(f"Run `{body}` now.", limit=500)
    assert len(code) >= 4 and all(len(p) <= 500 and p.count("`") == 2 for p in code)
    link = split_text(f"See [{body}](https://help.example.com/a) now, and **[{body}](https://e.com/b)**.", limit=500)
    assert len(link) >= 8 and all(len(p) <= 500 and p.count("[") == p.count("](https://") >= 1 for p in link)
    inner = [p for p in link if "help.example.com" not in p]  # the link in bold: closed inner first
    assert len(inner) >= 3 and all(p.startswith("**[") and p.rstrip(".").endswith("](https://e.com/b)**") for p in inner)
    assert sum(p.count("important") for p in code) == sum(p.count("important") for p in link) / 2 == 60


def test_split_text_never_runs_a_reopened_code_spans_backticks_into_the_texts() -> None:
    """A double-backtick span holding `quoted` words, cut next to one: the part ended "`step```" and the next
    began "```step`", runs of three that close nothing, and both parts showed their backticks as typed."""
    body = " ".join(["run `step` then go"] * 120)
    parts = split_text(f"Do `` {body} `` now.", limit=300)
    assert len(parts) >= 8 and all(len(p) <= 300 and "```" not in p for p in parts)
    md = MarkdownIt("commonmark")
    assert all([t.type for t in md.parseInline(p)[0].children].count("code_inline") == 1 for p in parts)
    assert sum(p.count("run `step` then go") for p in parts) == 120
    # Where every cut is next to a backtick, the added mark keeps a space from it, which CommonMark drops.
    parts = split_text("Do `` " + " ".join(["`ab`"] * 60) + " `` now.", limit=50)
    assert len(parts) >= 7 and all(len(p) <= 50 and "```" not in p for p in parts)
    assert all([t.type for t in md.parseInline(p)[0].children].count("code_inline") == 1 for p in parts[1:])


def test_split_text_cuts_a_code_span_with_no_spaces_in_it_rather_than_before_it() -> None:
    """A code span longer than a message with no space in it (a token, a long path) must be cut hard anyway, yet
    the part before it was cut at the last space before it: "Set the key to" went out as a message of its own."""
    token = "".join(f"k{i:03d}" for i in range(50))
    parts = split_text(f"Set the key to `{token}` and restart.", limit=100)
    assert len(parts) == 3 and all(len(p) <= 100 for p in parts)
    assert parts[0].startswith("Set the key to `k000") and parts[-1].endswith("` and restart.")
    md = MarkdownIt("commonmark")
    assert all([t.type for t in md.parseInline(p)[0].children].count("code_inline") == 1 for p in parts)
    assert "".join(re.findall(r"`([^`]*)`", "".join(parts))) == token


def test_split_text_keeps_a_link_whose_text_wraps_across_lines_a_link() -> None:
    """A link's text may run over a line break (CommonMark's soft break), which the splitter did not read as a
    link: cut at that line, one part ended "[Read the" and the next began "guide](https://…)", both as typed."""
    md = MarkdownIt("commonmark")

    def links(part: str) -> int:
        return sum(t.type == "link_open" for block in md.parse(part) if block.children for t in block.children)

    fits = split_text("Intro " + "word " * 50 + "\n[Read the\nguide](https://x.test/p) after.", limit=270)
    assert len(fits) == 2 and fits[1] == "[Read the\nguide](https://x.test/p) after." and links(fits[1]) == 1
    body = " ".join(["This is an important sentence."] * 10)
    longer = split_text(f"See [{body}\n{body}](https://help.example.com/a) now.", limit=400)
    assert len(longer) >= 2 and all(len(p) <= 400 and links(p) == 1 for p in longer)
    assert longer[0].startswith("See [This") and longer[-1].endswith("](https://help.example.com/a) now.")
    # A blank line ends the paragraph, and with it any link: "[a" and "b](…)" are as typed, and left so.
    assert links("".join(split_text("[" + "a " * 200 + "\n\n" + "b](https://x.test/p)", limit=300))) == 0


def test_split_text_repeats_a_tables_header_in_each_part() -> None:
    """A table cut between rows lost its header, and the later part was no table: raw pipes."""
    head = "| Plan | Price |\n|---|---:|\n"
    rows = [f"| Plan {i} | ${i} |" for i in range(40)]
    parts = split_text("Prices:\n\n" + head + "\n".join(rows) + "\n\nThat is all.", limit=200)
    assert len(parts) >= 4 and all(len(p) <= 200 for p in parts)
    tabled = [p for p in parts if "| Plan 3" in p or "| Plan 2" in p or "| Plan 1" in p]
    assert all(p.startswith(head) for p in tabled[1:]) and parts[0].startswith("Prices:\n\n" + head)
    joined = "\n".join(parts)
    assert all(joined.count(row + "\n") + joined.endswith(row) == 1 for row in rows)


def test_split_text_keeps_a_fitting_code_block_whole() -> None:
    code = "```python\nprint('a b c')\nprint('d e f')\n```"
    text = "Intro sentence here. " * 3 + "\n\n" + code + "\n\nAfter the code."
    parts = split_text(text, limit=70)
    assert sum(code in p for p in parts) == 1
    assert all(_fence_lines(p) % 2 == 0 for p in parts)


def test_split_text_reopens_an_oversized_code_block_in_each_part() -> None:
    body = "\n".join(f"value_{i} = compute({i})" for i in range(40))
    text = f"Here:\n\n```python\n{body}\n```\n\nThat is all."
    parts = split_text(text, limit=200)
    assert len(parts) > 3
    assert all(len(p) <= 200 for p in parts)
    code_parts = [p for p in parts if "value_" in p]
    assert all(p.count("```python") == 1 and _fence_lines(p) == 2 for p in code_parts)
    assert _content("\n".join(parts)) == _content(text)
    # every code line stays whole
    joined = "\n".join(parts)
    assert all(f"value_{i} = compute({i})" in joined for i in range(40))


def test_split_text_counts_utf16_units() -> None:
    text = "😀" * 100  # 200 UTF-16 units
    parts = split_text(text, limit=50, unit="utf16")
    assert [utf16_len(p) for p in parts] == [50, 50, 50, 50]
    assert "".join(parts) == text
    assert split_text(text, limit=150) == [text]  # 100 chars


def test_utf16_len_counts_astral_characters_twice() -> None:
    assert utf16_len("a😀é") == 4
    assert text_length("a😀é", unit="chars") == 3


def test_render_citations_numbers_drops_duplicates_and_links_in_each_dialect() -> None:
    cites = [
        Citation(source="faq.md", title="Refunds & returns", url="https://ex.com/r?a=1&b=2"),
        Citation(source="faq.md", title="Refunds & returns", url="https://ex.com/r?a=1&b=2"),
        Citation(source="notes.txt", title="Internal notes"),
    ]
    assert render_citations(cites, style="plain") == (
        "Sources:\n1. Refunds & returns (https://ex.com/r?a=1&b=2)\n2. Internal notes"
    )
    assert render_citations(cites, style="markdown").splitlines()[1] == "1. [Refunds & returns](https://ex.com/r?a=1&b=2)"
    assert '<a href="https://ex.com/r?a=1&amp;b=2">Refunds &amp; returns</a>' in render_citations(cites, style="html")
    assert "<https://ex.com/r?a=1&b=2|Refunds &amp; returns>" in render_citations(cites, style="mrkdwn")
    assert render_citations([], style="plain") == ""


@pytest.mark.parametrize(("style", "heading"), [
    ("plain", "Fuentes & enlaces:"), ("markdown", "**Fuentes & enlaces:**"),
    ("html", "<b>Fuentes &amp; enlaces:</b>"), ("mrkdwn", "*Fuentes &amp; enlaces:*"),
])
def test_render_citations_sets_the_bots_heading_bold_in_each_dialect(style, heading) -> None:
    """Each adapter had "Sources:" written into it, whatever language the bot speaks."""
    footer = render_citations([Citation(source="faq.md", title="Devoluciones")], style=style,
                              heading="Fuentes & enlaces:")
    assert footer.splitlines() == [heading, "1. Devoluciones"]


# -- properties -------------------------------------------------------------------------------

_word = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Zs", "Cc"), blacklist_characters="`~"),
                min_size=1, max_size=25)
_url = st.builds(lambda path: f"https://example.com/{path}", st.from_regex(r"[a-z0-9/_\-]{0,40}", fullmatch=True))
_sentence = st.lists(st.one_of(_word, _url), min_size=1, max_size=15).map(" ".join).map(lambda s: s + ".")
_paragraph = st.lists(_sentence, min_size=1, max_size=6).map(lambda ss: " ".join(ss))
_code = st.lists(st.from_regex(r"[ a-z0-9=()+]{0,60}", fullmatch=True), min_size=1, max_size=30).map(
    lambda lines: "```\n" + "\n".join(lines) + "\n```"
)
_document = st.lists(st.one_of(_paragraph, _paragraph, _code), min_size=1, max_size=8).flatmap(
    lambda blocks: st.sampled_from(["\n\n", "\n"]).map(lambda sep: sep.join(blocks))
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_document, limit=st.integers(min_value=40, max_value=400), unit=st.sampled_from(["chars", "utf16"]))
def test_split_text_property_parts_fit_nothing_lost_fences_balanced(text: str, limit: int, unit: str) -> None:
    parts = split_text(text, limit=limit, unit=unit)
    assert all(text_length(p, unit=unit) <= limit for p in parts)
    assert all(p.strip() for p in parts)
    assert _content("\n".join(parts)) == _content(text)
    assert all(_fence_lines(p) % 2 == 0 for p in parts)
    # A URL that fits the limit is never cut.
    for url in _URL.findall(text):
        if text_length(url, unit=unit) <= limit:
            assert any(url in p for p in parts)


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="`~*_|["), max_size=600),
    limit=st.integers(min_value=2, max_value=120),
    unit=st.sampled_from(["chars", "utf16"]),
)
def test_split_text_property_arbitrary_text_in_order(text: str, limit: int, unit: str) -> None:
    parts = split_text(text, limit=limit, unit=unit)
    assert all(text_length(p, unit=unit) <= limit for p in parts)
    # Without fences, emphasis, code, links or tables a part is a verbatim slice of the text, in order.
    pos = 0
    for part in parts:
        found = text.find(part, pos)
        assert found >= pos
        pos = found + len(part)
    assert re.sub(r"\s+", "", "".join(parts)) == re.sub(r"\s+", "", text)


def _blns() -> list[str]:
    return [s for s in json.loads(BLNS.read_text(encoding="utf-8")) if s.strip()]


@pytest.mark.parametrize("unit", ["chars", "utf16"])
def test_split_text_naughty_strings(unit: str) -> None:
    for naughty in _blns():
        text = " ".join([naughty] * 12) + "\n\n" + naughty
        for limit in (17, 64):
            parts = split_text(text, limit=limit, unit=unit)
            assert all(text_length(p, unit=unit) <= limit for p in parts), naughty
            assert _content("\n".join(parts)) == _content(text), naughty


def test_fences_are_found_without_parsing_inline_markdown() -> None:
    """The splitter parsed every link, emphasis and code span of an answer to find its fences: 130 KB of
    prose took 110 ms, 40 KB of "[" 450 ms, each on the event loop (bench.splitter)."""
    from channels import render

    parsed = render._MD.parse("a [b](c) *d*\n\n```\n[x\n```\n")
    assert [t.type for t in parsed if t.type in ("inline", "fence")] == ["inline", "fence"]
    assert all(not t.children for t in parsed)  # the inline tokens left unparsed
    assert render.fence_spans("a [b](c) *d*\n\n```\n[x\n```\n") == [(14, 24)]


def test_a_run_of_brackets_is_searched_for_links_once_not_once_per_bracket() -> None:
    """Each "[" of a line searched the rest of it for "](": 13,000 of them took 0.6 s to split, 130,000 a
    minute (bench.splitter). A link is found from its own "[", and is still kept whole at a cut."""
    from channels import render

    assert render._MD_LINK.search("[[[[see [the guide](https://example.com/a)").group(0) == \
        "[the guide](https://example.com/a)"
    text = "word " * 30 + "[the guide](https://example.com/a) " + "[" * 5000
    parts = split_text(text, limit=160)
    assert any("[the guide](https://example.com/a)" in p for p in parts)


@pytest.mark.parametrize(("unit", "emoji"), [
    ("utf16", "\U0001f1e9\U0001f1ea"),  # a flag: two regional indicators
    ("utf16", "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"),  # a family: people joined by ZWJ
    ("utf16", "\U0001f44d\U0001f3fd"),  # a thumbs up with its skin tone
    ("chars", "\u2764\ufe0f"),  # a heart with its emoji presentation selector
    ("chars", "e\u0301"),  # e and its combining acute accent
])
def test_split_text_with_no_space_cuts_between_emoji_not_inside_one(unit: str, emoji: str) -> None:
    # A text with nowhere else to cut was cut at the limit, inside an emoji: a flag became two letters (and
    # every later flag was paired wrong), a family a row of people, a thumbs up lost its skin tone.
    text = "a" + emoji * (4000 // text_length(emoji, unit=unit))
    parts = split_text(text, limit=1600, unit=unit)
    assert len(parts) > 1 and "".join(parts) == text
    for part in parts:
        assert text_length(part, unit=unit) <= 1600
        assert part.lstrip("a").replace(emoji, "") == ""
