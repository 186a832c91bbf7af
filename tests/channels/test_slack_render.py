"""Slack adapter: Markdown to mrkdwn rendering, escaping and link safety."""

from __future__ import annotations

import json
import re

from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from channels.slack import markdown_to_mrkdwn
from channels.slack_render import mrkdwn_to_markdown
from tests.channels.slack_helpers import FIXTURES


def test_slack_markdown_converted_and_escaped():
    out = markdown_to_mrkdwn("# Hours\n**Open** 9 & 5 <b>not html</b>\n> quote\n- see [docs](https://x.io/?a=1&b=2)")
    assert out.splitlines() == [
        "*Hours*",
        "*Open* 9 &amp; 5 &lt;b&gt;not html&lt;/b&gt;",
        "> quote",
        "• see <https://x.io/?a=1&amp;b=2|docs>",
    ]


def test_slack_code_block_escaped_not_formatted():
    out = markdown_to_mrkdwn("Run:\n```python\nif a < b and *x*:\n    pass\n```\nDone")
    assert out == "Run:\n```\nif a &lt; b and *x*:\n    pass\n```\nDone"


def test_slack_unsafe_link_scheme_not_linked():
    out = markdown_to_mrkdwn("[click](javascript:alert(1)) now")
    assert out == "click now"


def test_slack_link_whose_url_holds_parentheses_stays_one_link():
    """The URL was read up to its first ")": `<https://en.wikipedia.org/wiki/Fee_(banking|fees>)`."""
    out = markdown_to_mrkdwn("See [fees](https://en.wikipedia.org/wiki/Fee_(banking)) and [a](<https://x.io/a_(b)>).")
    assert out == "See <https://en.wikipedia.org/wiki/Fee_(banking)|fees> and <https://x.io/a_(b)|a>."


def test_slack_angle_bracket_link_destination_is_one_link():
    """CommonMark's `[t](<url with spaces>)` was shown as `<&lt;<https://x.io/a> b&gt;|t>`."""
    assert markdown_to_mrkdwn("[t](<https://x.io/a b>) or [u]( <https://x.io/c> )") == (
        "<https://x.io/a%20b|t> or <https://x.io/c|u>")


def test_slack_html_entity_is_the_character_it_names():
    """A model's `A &amp; B` reached Slack as `A &amp;amp; B`, shown as "A &amp; B"; in code it stays as written."""
    out = markdown_to_mrkdwn("A &amp; B &lt;3 &copy; AT&T &notanentity `&amp;` [Q &amp; A](https://x.io/?a=1&amp;b=2)")
    assert out == ("A &amp; B &lt;3 © AT&amp;T &amp;notanentity `&amp;amp;` <https://x.io/?a=1&amp;b=2|Q &amp; A>")


_CONTROL = re.compile(r"<(?:https?://|mailto:)[^<>\s|]+(?:\|[^<>]*)?>")


def _raw_angles(mrkdwn: str) -> str:
    """What is left after removing real link controls and line-leading quote markers."""
    stripped = _CONTROL.sub("", mrkdwn)
    return re.sub(r"^(\s*)> ", r"\1", stripped, flags=re.MULTILINE)


_PIECES = list("ab <>&*_`[]()\n:/.|#-~") + ["https://x.io/", "```\n", "> "]


@hsettings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=60).map("".join))
def test_slack_mrkdwn_never_leaks_raw_control_characters(text: str):
    out = _raw_angles(markdown_to_mrkdwn(text))
    assert "<" not in out and ">" not in out


def test_slack_naughty_strings_render_safely():
    strings = json.loads((FIXTURES / "badinput" / "blns.json").read_text())
    for text in strings:
        out = _raw_angles(markdown_to_mrkdwn(text))
        assert "<" not in out and ">" not in out, text


def test_slack_a_markdown_link_without_a_url_is_its_label():
    """Hypothesis found `[a]( )` rendered as `< |a>`, a Slack link to nowhere."""
    assert markdown_to_mrkdwn("[a]( )") == markdown_to_mrkdwn("[a]()") == "a"
    assert markdown_to_mrkdwn("**b** [a](  ) and [docs](https://x.io/a)") == "*b* a and <https://x.io/a|docs>"


def test_slack_text_that_is_no_markdown_link_stays_text():
    """Hypothesis found `[a](()` rendered as `<(|a>`: no link by CommonMark (its parentheses do not balance),
    it was left to the converter, which makes any `[x](y)` a Slack link, its URL unchecked."""
    assert markdown_to_mrkdwn("[a](()") == "[a](()"
    assert markdown_to_mrkdwn("see [a](x(y) now") == "see [a](x(y) now"
    assert markdown_to_mrkdwn("![i](javascript:x(1) [b](c)") == "![i](javascript:x(1) b"


def test_an_operators_slack_marks_become_markdown():
    """An operator's `*approved*` in Slack is bold there; read as Markdown it reached the customer in italics."""
    text = "Your refund is *approved* and ~pending~ gone, 2*3*4 _soon_.\n* a list item\n`*code*`\n```\n*x*\n```"
    assert mrkdwn_to_markdown(text) == (
        "Your refund is **approved** and ~~pending~~ gone, 2*3*4 _soon_.\n* a list item\n`*code*`\n```\n*x*\n```")


def test_slack_an_escaped_mark_stays_literal():
    """Slack has no escape: `\\*not bold\\*` was sent as `*not bold*`, which Slack shows bold."""
    assert markdown_to_mrkdwn("\\*not bold\\* \\_no\\_ \\~no\\~ a\\\\b \\# **bold**") == (
        "∗not bold∗ ＿no＿ ∼no∼ a\\b # *bold*")


def test_slack_link_label_or_url_with_control_characters_stays_one_link():
    """A `|` that reached a label held (escaped `\\|`, or in inline code) was sent raw (`<https://x.io|a|b>`), and a URL
    holding `<` or `>` was no link at all (`[a](<https://x.io/?q=>&lt;2&gt;)`): each is one link now, its URL
    percent-encoded and its label without `|` or a raw `<`/`>`."""
    assert markdown_to_mrkdwn("[a\\|b](https://x.io)") == "<https://x.io|a¦b>"
    assert markdown_to_mrkdwn("[`a|b` <c>](https://x.io)") == "<https://x.io|`a¦b` &lt;c&gt;>"
    assert markdown_to_mrkdwn("[a|b & c](https://x.io/?q=1&r=<2>|3)") == (
        "<https://x.io/?q=1&amp;r=%3C2%3E%7C3|a¦b &amp; c>")
    assert markdown_to_mrkdwn("[x](<https://x.io/a|b>) https://x.io/c|d") == (
        "<https://x.io/a%7Cb|x> <https://x.io/c%7Cd>")


def test_slack_escaped_angle_bracket_is_text_never_a_mention():
    """CommonMark's `\\<` is a literal `<`: it was sent as `\\&lt;!channel&gt;`, its backslash shown."""
    assert markdown_to_mrkdwn("\\<!channel> \\<@U123> <!here> &lt;@U1&gt;") == (
        "&lt;!channel&gt; &lt;@U123&gt; &lt;!here&gt; &lt;@U1&gt;")


_LINK = re.compile(r"<(https?://|mailto:)[^<>\s|]+(\|[^<>|]*)?>")


@hsettings(max_examples=200, deadline=None)
@given(st.text(alphabet="ab|<>&`\\ *", max_size=12), st.text(alphabet="ab|<>&()", max_size=8))
def test_slack_any_link_label_and_url_render_as_one_well_formed_link(label: str, path: str):
    for text in (f"[{label}](<https://x.io/{path}>)", f"[{label}](https://x.io/{path})"):
        out = markdown_to_mrkdwn(text)
        assert all(_LINK.fullmatch(token) for token in re.findall(r"<[^<>]*>", out)), (text, out)
        assert "<" not in _LINK.sub("", out) and ">" not in _LINK.sub("", out), (text, out)


def test_slack_an_autolink_that_is_no_safe_url_is_text():
    """`<https:x>` or `<https://>` matched as an autolink but failed `safe_link_url`, and was sent between raw angle
    brackets (`<https:x>`): a Slack link control to a URL never vetted. It is its text now, escaped."""
    assert markdown_to_mrkdwn("<https://> and <http:evil.io> or <https://x.io>") == (
        "&lt;https://&gt; and &lt;http:evil.io&gt; or <https://x.io>")


def test_a_code_block_indented_in_a_list_item_stays_code():
    """A fence indented four spaces under "1." (how models nest a step's code) is a code block to CommonMark, but was
    read as prose: `__init__` became *init*, `a * b * c` became a _ b _ c, and `**note**` bold, in the customer's code."""
    md = ("1. Define it:\n    ```python\n    def __init__(self, **kwargs):\n        x = a * b * c  # **note** <1>\n"
          "    ```\n2. Done")
    assert markdown_to_mrkdwn(md) == ("1. Define it:\n```\ndef __init__(self, **kwargs):\n    x = a * b * c  # **note** &lt;1&gt;\n"
                                      "```\n2. Done")
    quoted = markdown_to_mrkdwn("> Try:\n> ```\n> ls *.txt | grep __a__\n> ```")
    assert "```\nls *.txt | grep __a__\n```" in quoted


def test_backticks_inside_a_code_block_do_not_end_it_on_slack():
    """Slack ends a code block at the first ``` in it and knows no longer fence: a ````-fenced block showing ``` (how
    to write a code block) ended there, and the rest showed as text. They keep their look with zero-width spaces."""
    out = markdown_to_mrkdwn("Write:\n````md\n```python\nprint(1)\n```\n````\nDone")
    assert out.count("```") == 2 and out.startswith("Write:\n```\n") and out.endswith("\n```\nDone")
    assert out.replace("\u200b", "") == "Write:\n```\n```python\nprint(1)\n```\n```\nDone"
