"""Discord adapter: Markdown adapted to what Discord renders."""

from __future__ import annotations

from channels.discord import to_discord_markdown


def test_to_discord_markdown_adapts_headings_and_images_but_not_code():
    text = "#### Steps\n![diagram](https://x.example/d.png)\n```\n#### not a heading\n```\n## Kept"
    assert to_discord_markdown(text) == (
        "**Steps**\n[diagram](https://x.example/d.png)\n```\n#### not a heading\n```\n## Kept"
    )
