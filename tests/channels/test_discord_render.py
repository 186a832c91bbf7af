"""Discord adapter: Markdown adapted to what Discord renders."""

from __future__ import annotations

from channels.discord import MAX_LENGTH, render_message, to_discord_markdown
from gateway.models import ConversationRef, OutboundMessage


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


def test_a_long_code_block_in_a_list_item_is_closed_and_reopened_across_messages():
    """A fence indented in a list item went unseen by the splitter: the first message ended inside the code
    block unclosed and the second showed the rest of the code as text, its closing ``` opening a new block.
    Inline code holding ``` (in the prose, and at the start of a line) is no fence."""
    code = "\n".join(f"    step_{i} = run(value_{i})  # a comment" for i in range(90))
    text = ("Wrap code in `` ``` `` fences.\n```a``` is inline.\n\n1. Install:\n\n    ```bash\n" + code
            + "\n    ```\n\n2. Done.")
    chunks = render_message(OutboundMessage(ConversationRef(channel="discord", chat="1"), text))
    assert len(chunks) == 2 and all(len(c) <= MAX_LENGTH for c in chunks)
    assert chunks[0].endswith("\n    ```") and chunks[1].startswith("```bash\n    step_")
    fences = [[line for line in c.split("\n") if line.strip() in ("```", "```bash")] for c in chunks]
    assert fences == [["    ```bash", "    ```"], ["```bash", "```"]]  # out of the list item, as its opener
    assert chunks[1].endswith("\n```\n\n2. Done.")


def test_a_line_starting_with_inline_code_is_no_code_block_for_the_prose_after_it():
    """```a``` at the start of a line was taken for a fence: the heading and the entity after it, up to the
    next ``` line, were sent as typed."""
    text = "```a``` is code &amp; more\n\n#### Heading\n\n```\n#### kept &amp;\n```"
    assert to_discord_markdown(text) == "```a``` is code & more\n\n**Heading**\n\n```\n#### kept &amp;\n```"


def test_a_long_code_block_in_a_block_quote_is_closed_and_reopened_across_messages():
    """A fence in a block quote (`> ```…`) was left to be cut as prose: the first message ended inside the
    code block unclosed, and the second showed the rest of the code as quoted text."""
    code = "\n".join(f"> step_{i} = run(value_{i})  # a comment" for i in range(90))
    text = "The log said:\n\n> ```python\n" + code + "\n> ```\n\nDone."
    chunks = render_message(OutboundMessage(ConversationRef(channel="discord", chat="1"), text))
    assert len(chunks) == 2 and all(len(c) <= MAX_LENGTH for c in chunks)
    assert chunks[0].endswith("\n> ```") and chunks[1].startswith("> ```python\n> step_")
    assert chunks[1].endswith("> step_89 = run(value_89)  # a comment\n> ```\n\nDone.")


def test_three_backticks_inside_a_code_block_do_not_end_it_on_discord():
    """Discord ends a code block at the first ``` in it, and knows no longer fence (````) nor ~~~: an answer
    showing Markdown source broke out of its block there. Such a run keeps its look, split by zero-width spaces."""
    ticks = "`\u200b`\u200b`"
    text = "Write:\n\n````md\n```python\nprint(1)\n```\n````\n\n~~~sh\necho '```'\n~~~\n\nThen ```x``` inline."
    assert to_discord_markdown(text) == (
        f"Write:\n\n```md\n{ticks}python\nprint(1)\n{ticks}\n```\n\n```sh\necho '{ticks}'\n```\n\nThen ```x``` inline.")


def test_a_code_block_left_unclosed_is_closed_on_discord():
    """An answer cut off inside a code block (the model's output limit) ends its block on every CommonMark
    platform; Discord shows an unclosed ``` as typed, and the code after it as prose."""
    assert to_discord_markdown("Run:\n\n~~~sh\necho '```'\nls") == "Run:\n\n```sh\necho '`\u200b`\u200b`'\nls\n```"
    assert to_discord_markdown("> ```\n> a\n\nAfter.") == "> ```\n> a\n> ```\n\nAfter."
