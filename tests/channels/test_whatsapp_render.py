"""WhatsApp rendering: what the customer's WhatsApp shows for the model's Markdown."""

from __future__ import annotations

from channels.whatsapp import to_whatsapp


def test_an_escaped_mark_stays_literal_on_whatsapp() -> None:
    """WhatsApp has no escape: `\\*not bold\\*` was sent as `*not bold*`, which WhatsApp shows bold."""
    text = "\\*not bold\\* \\_not italic\\_ \\~no strike\\~ \\`no code\\` &#42;x&#42; &amp; a\\\\b **bold** `a\\*b`"
    assert to_whatsapp(text) == "∗not bold∗ ＿not italic＿ ∼no strike∼ ˋno codeˋ ∗x∗ & a\\b *bold* `a\\*b`"
