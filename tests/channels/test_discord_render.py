"""Discord adapter: Markdown adapted to what Discord renders."""

from __future__ import annotations

from channels.discord import to_discord_markdown


def test_to_discord_markdown_adapts_headings_and_images_but_not_code():
    text = "#### Steps\n![diagram](https://x.example/d.png)\n```\n#### not a heading\n```\n## Kept"
    assert to_discord_markdown(text) == (
        "**Steps**\n[diagram](https://x.example/d.png)\n```\n#### not a heading\n```\n## Kept"
    )


def test_to_discord_markdown_turns_a_table_into_rows():
    """Discord renders no tables: the customer saw the pipes and the `|---|---|` line as typed."""
    text = "Prices:\n\n| Plan | **Price** |\n|---|---:|\n| Plus | $6 [1] |\n| **Team** | `12` |\n\nSee [1].\n```\n| x |\n|---|\n```"
    assert to_discord_markdown(text) == (
        "Prices:\n\n**Plan** | **Price**\nPlus | $6 [1]\n**Team** | `12`\n\nSee [1].\n```\n| x |\n|---|\n```"
    )


def test_to_discord_markdown_shows_an_html_entity_as_its_character():
    """Discord showed a model's `A &amp; B` as typed; code keeps it as written, markup characters stay literal."""
    text = "Q &amp; A &copy; AT&T &lt;@everyone&gt; &#42;no&#42; `&amp;` [R &amp; D](https://x.io/?a=1&amp;b=2)\n```\n&amp;\n```"
    assert to_discord_markdown(text) == (
        "Q & A © AT&T \\<@everyone\\> \\*no\\* `&amp;` [R & D](https://x.io/?a=1&b=2)\n```\n&amp;\n```"
    )
