"""TelegramAdapter: Markdown rendered to Telegram HTML, escaping, splitting at the UTF-16 limit and citation links."""

from __future__ import annotations

import json

import pytest
from aiogram.exceptions import TelegramBadRequest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from channels.telegram import TelegramAdapter
from channels.telegram_bot import make_bot
from channels.telegram_render import markdown_to_html, render_messages, visible_length
from gateway.models import Citation, OutboundMessage
from tests.channels.telegram_helpers import (  # noqa: F401 - `fake` and `adapter` fixtures
    DM,
    FIXTURES,
    _settings,
    adapter_fixture,
    fake_fixture,
)
from tests.fakes.telegram_api import FakeTelegramAPI, parse_telegram_html, utf16_len


def test_fake_rejects_malformed_html_like_telegram() -> None:
    for bad in ("<b>open", "a < b", "<p>para</p>", "<b><i>x</b></i>", "<code><b>x</b></code>",
                '<a href="https://a.io"><code>x</code></a>', '<a href="https://a.io"><a href="https://b.io">x</a></a>'):
        with pytest.raises(ValueError):
            parse_telegram_html(bad)
    assert parse_telegram_html("a &lt; b &amp; &#128512;") == ("a < b & 😀", [])


async def test_fake_answers_malformed_html_with_cant_parse_entities(fake: FakeTelegramAPI) -> None:
    bot = make_bot(_settings(fake.base_url))
    try:
        with pytest.raises(TelegramBadRequest, match="can't parse entities"):
            await bot.send_message(chat_id=1, text="1 < 2 <b>", parse_mode="HTML")
    finally:
        await bot.session.close()
    assert not fake.sent


def test_render_keeps_code_and_images_out_of_a_link() -> None:
    """Telegram's links can't hold code or another link: `<a><code>` was refused, the whole reply lost."""
    for text, visible in (("[`pip install x`](https://a.io/x)", "pip install x"),
                          ("[![Logo](https://a.io/l.png)](https://a.io)", "Logo"),
                          ("**[run `make`](https://a.io)** and `make`", "run make and make")):
        rendered = markdown_to_html(text)
        shown, entities = parse_telegram_html(rendered)
        assert shown == visible and [e["url"] for e in entities if e["type"] == "text_link"] == [
            "https://a.io/x" if "/x" in text else "https://a.io"]
    assert markdown_to_html("**[run `make`](https://a.io)** and `make`") == (
        '<b><a href="https://a.io">run make</a></b> and <code>make</code>')


def test_render_escapes_naughty_strings_into_valid_telegram_html() -> None:
    blns = json.loads((FIXTURES.parents[1] / "badinput" / "blns.json").read_text())
    for text in blns:
        html = markdown_to_html(text)
        parse_telegram_html(html)  # raises on anything Telegram would refuse


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=400))
def test_render_any_markdown_is_valid_telegram_html(text: str) -> None:
    parse_telegram_html(markdown_to_html(text))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(["word", "😀", "**b**", "<x>", "&", "\n", "\n\n", "```\ncode\n```", "- item", "https://a.example/p"]), max_size=300))
def test_render_messages_each_fit_the_limit(tokens: list[str]) -> None:
    for message in render_messages(" ".join(tokens), limit=120):
        assert parse_telegram_html(message) and visible_length(message) <= 120


async def test_send_escaping_round_trips_through_telegram(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    answer = ("# Plan & <pricing>\n\nUse **bold** or *it*; 1 < 2 > 0 & `a<b>&c`.\n\n"
              "- see [the docs](https://docs.example/a?b=1&c=\"2\")\n- <script>alert(1)</script>\n\n"
              "```python\nif x < 3 and y > 2:\n    pass\n```")
    ids = await adapter.send(OutboundMessage(conversation=DM, text=answer))
    (msg,) = fake.sent
    assert ids == [str(msg.message_id)] and msg.parse_mode == "HTML"
    assert msg.text == ("Plan & <pricing>\n\nUse bold or it; 1 < 2 > 0 & a<b>&c.\n\n"
                        "• see the docs\n• <script>alert(1)</script>\n\nif x < 3 and y > 2:\n    pass")
    kinds = {e["type"] for e in msg.entities}
    assert {"bold", "italic", "code", "text_link", "pre"} <= kinds
    assert any(e.get("url") == 'https://docs.example/a?b=1&c=%222%22' for e in msg.entities)


async def test_send_splits_long_answer_at_the_utf16_limit(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    paragraphs = [f"Paragraph {i} 😀 " + "emoji 🎉 text " * 40 for i in range(30)]  # ~17k UTF-16 units
    ids = await adapter.send(OutboundMessage(conversation=DM, text="\n\n".join(paragraphs)))
    assert len(ids) == len(fake.sent) == len(fake.calls("sendMessage")) >= 4
    assert all(utf16_len(m.text) <= 4096 for m in fake.sent)
    joined = "\n\n".join(m.text for m in fake.sent)
    assert [p.strip() for p in joined.split("\n\n")] == [p.strip() for p in paragraphs]


async def test_send_never_splits_inside_a_code_block(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    code = "```\n" + "\n".join(f"line {i} <tag> & more" for i in range(60)) + "\n```"
    text = "intro " * 600 + "\n\n" + code + "\n\n" + "outro " * 300
    await adapter.send(OutboundMessage(conversation=DM, text=text))
    pre = [m for m in fake.sent if any(e["type"] == "pre" for e in m.entities)]
    assert len(fake.sent) >= 2 and len(pre) == 1
    assert pre[0].text.count("<tag> & more") == 60


async def test_send_renders_citations_as_links(adapter: TelegramAdapter, fake: FakeTelegramAPI) -> None:
    cites = (Citation(source="kb/returns.md", title="Returns & <refunds>", url="https://help.example/returns?x=1&y=2"),
             Citation(source="kb/faq.md", title="FAQ"))
    await adapter.send(OutboundMessage(conversation=DM, text="You have 30 days [1].", citations=cites))
    (msg,) = fake.sent
    assert "Sources:" in msg.text and "1. Returns & <refunds>" in msg.text and "2. FAQ" in msg.text
    links = [e for e in msg.entities if e["type"] == "text_link"]
    assert [link["url"] for link in links] == ["https://help.example/returns?x=1&y=2"]


def test_render_messages_moves_footer_to_its_own_message_when_full() -> None:
    body = "word " * 817  # 4084 chars once stripped: the footer no longer fits
    messages = render_messages(body, (Citation(source="a", title="A title", url="https://a.example"),))
    assert len(messages) == 2 and "https://a.example" in messages[1]
    assert all(visible_length(m) <= 4096 for m in messages)


def test_render_messages_keeps_a_cut_table_a_table_and_a_long_bold_run_bold() -> None:
    """A table cut across messages lost its header (the next message showed raw pipes), and bold longer than a
    message showed '**' as typed in both."""
    rows = "\n".join(f"| Plan {i} with a long name | ${i} per month |" for i in range(200))
    messages = render_messages("Intro.\n\n| Plan | Price |\n|---|---:|\n" + rows + "\n\nAfter.")
    assert len(messages) >= 2
    assert all(m.count("<b>Plan</b> | <b>Price</b>") == 1 and "|---" not in m for m in messages)
    assert all("| " not in m.replace(" | ", "") for m in messages)
    bold = render_messages("**" + " ".join(["This is an important sentence."] * 200) + "**")
    assert len(bold) == 2 and all(m.startswith("<b>") and m.endswith("</b>") and "*" not in m for m in bold)


def test_render_messages_keeps_a_long_code_block_of_a_list_item_code_in_each_message() -> None:
    """A code block indented in a list item ('1. Install:' then '    ```bash') longer than a message was reopened
    unindented and closed indented: outside the list no closer, so each later message showed '    ```' as code,
    and the last one '2. Done.' too."""
    code = "\n".join(f"    step_{i} = run(value_{i})  # a comment" for i in range(40))
    messages = render_messages("1. Install:\n\n    ```bash\n" + code + "\n    ```\n\n2. Done.", limit=500)
    assert len(messages) >= 3 and all(m.count("<pre>") == 1 and "```" not in m for m in messages)
    assert messages[-1].endswith("</code></pre>\n\n2. Done.") and sum(m.count("step_") for m in messages) == 40
