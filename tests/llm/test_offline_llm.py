"""The offline extractive responder, called through the real LiteLLM and the LLMRouter."""

from __future__ import annotations

import json
import re

import pytest

from gateway.llm import LLMRouter
from gateway.offline.provider import answer, split_sentences, stem
from gateway.pipeline.citations import verify_citations
from gateway.pipeline.prompts import build_messages
from gateway.settings import BotSettings
from tests.llm.hits import PASSWORD, PLANS, REFUNDS, FakeHit

BOT = BotSettings(name="demo", fallback_text="Sorry, our help center does not cover that.")


@pytest.fixture(scope="module")
def router() -> LLMRouter:
    return LLMRouter([])


def markers(text: str) -> set[int]:
    return {int(n) for n in re.findall(r"\[(\d+)\]", text)}


async def test_offline_answers_from_extracts_with_valid_citation(router: LLMRouter) -> None:
    hits = [PLANS, PASSWORD, REFUNDS]
    messages = build_messages(BOT, history=[], user_text="How do I reset my password?", hits=hits)

    result = await router.complete(model="offline", messages=messages)

    assert "open Settings and choose Security" in result.text
    assert markers(result.text) == {2}
    verified = verify_citations(result.text, hits, fallback_text=BOT.fallback_text)
    # Gate 2 renumbers markers to the citations list: extract 2 is the first (only) cited document.
    assert verified.text == result.text.replace("[2]", "[1]")
    assert [c.source for c in verified.citations] == ["account/password.md"]
    assert result.usage.prompt_tokens > 50 and result.usage.completion_tokens > 5


async def test_offline_falls_back_without_extracts(router: LLMRouter) -> None:
    messages = build_messages(BOT, history=[], user_text="How do I reset my password?", hits=[])

    result = await router.complete(model="offline", messages=messages)

    assert result.text == BOT.fallback_text


async def test_offline_falls_back_when_nothing_overlaps(router: LLMRouter) -> None:
    messages = build_messages(BOT, history=[], user_text="Will it rain in Lisbon tomorrow?", hits=[REFUNDS, PLANS])

    result = await router.complete(model="offline", messages=messages)

    assert result.text == BOT.fallback_text


async def test_offline_looks_for_the_subject_not_the_words_that_frame_the_question(router: LLMRouter) -> None:
    # Every extract mentions refunds, so that word alone weighs little; "references", which none
    # holds, weighed as much again and left no sentence enough of the question.
    billing = FakeHit("## Billing\nWe charge your card monthly. Refunds and credits show on the next invoice.",
                      "billing/index.md", "Billing", ("Billing",))
    contact = FakeHit("## Contact\nWrite to support about refunds, invoices or login problems.", "contact.md", "Contact")
    hits = [billing, contact, REFUNDS]
    messages = build_messages(BOT, history=[], user_text="What references to refunds are there?", hits=hits)

    result = await router.complete(model="offline", messages=messages)

    assert "refund within 30 days" in result.text and markers(result.text) == {3}


def test_offline_answers_a_how_to_question_with_the_steps_of_its_section() -> None:
    reset = FakeHit(
        "## Resetting a forgotten password\n\n1. On the sign-in page, choose **Forgot password?**.\n"
        "2. Enter the email address of your account.\n3. Choose a new password.\n\n"
        "Resetting your password signs you out on every other device.",
        "account.md", "Your account", ("Your account", "Resetting a forgotten password"))
    # The side remark holds both words of the question; the steps hold one at most.
    messages = build_messages(BOT, history=[], user_text="How do I reset my password?", hits=[reset, PLANS])
    assert answer(messages) == (
        "On the sign-in page, choose Forgot password? [1]. Enter the email address of your account [1]. "
        "Choose a new password [1].")
    # Not a how-to question: the best sentence.
    messages = build_messages(BOT, history=[], user_text="What happens when I reset my password?", hits=[reset, PLANS])
    assert answer(messages).startswith("Resetting your password signs you out")


def test_offline_takes_the_steps_of_the_first_extract_over_a_remark_further_down() -> None:
    """'Change' is in no heading: the error section's remark holds both words, and is no way to do it."""
    reset = FakeHit(
        "## Resetting a forgotten password\n\n1. On the sign-in page, choose **Forgot password?**.\n"
        "2. Enter the email address of your account.\n3. Choose a new password.",
        "account.md", "Your account", ("Your account", "Resetting a forgotten password"))
    expired = FakeHit(
        "### E-AUTH-401: session expired\n\nYour sign-in has expired or your password was changed on another device.",
        "sync.md", "Sync errors", ("Sync errors", "E-AUTH-401: session expired"))
    steps = ("On the sign-in page, choose Forgot password? [1]. Enter the email address of your account [1]. "
             "Choose a new password [1].")
    ask = "How do I change my password?"
    assert answer(build_messages(BOT, history=[], user_text=ask, hits=[reset, expired])) == steps
    # Ranked the other way round, retrieval's first extract is the remark's: it is quoted.
    assert answer(build_messages(BOT, history=[], user_text=ask, hits=[expired, reset])).startswith("Your sign-in has expired")
    # Not a how-to question: the best sentence.
    assert answer(build_messages(BOT, history=[], user_text="Why was my password changed?",
                                 hits=[reset, expired])).startswith("Your sign-in has expired")
    # The first extract's section names no word of the question: its steps are no answer.
    plans = FakeHit("## Upgrading\n\n1. Open Settings → Billing.\n2. Choose a plan.", "plans.md", "Plans",
                    ("Plans", "Upgrading"))
    assert answer(build_messages(BOT, history=[], user_text=ask, hits=[plans, expired])).startswith("Your sign-in has expired")


async def test_offline_answers_the_last_user_message(router: LLMRouter) -> None:
    history = [{"role": "user", "content": "How do I reset my password?"}, {"role": "assistant", "content": "..."}]
    messages = build_messages(BOT, history=history, user_text="How long do refunds take?", hits=[PASSWORD, REFUNDS])

    result = await router.complete(model="offline", messages=messages)

    assert "5 business days" in result.text and markers(result.text) == {2}


async def test_offline_stream_matches_completion_word_by_word(router: LLMRouter) -> None:
    messages = build_messages(BOT, history=[], user_text="What does the Team plan cost?", hits=[PLANS])
    tokens: list[str] = []

    async def collect(token: str) -> None:
        tokens.append(token)

    streamed = await router.complete(model="offline", messages=messages, on_token=collect)
    whole = await router.complete(model="offline", messages=messages)

    assert streamed.finish_reason == "stop"
    assert "".join(tokens) == streamed.text == whole.text
    assert len(tokens) == len(whole.text.split(" ")) > 3
    assert "29 dollars" in streamed.text
    assert streamed.usage.completion_tokens > 0 and streamed.usage.cost_usd == 0.0


async def test_offline_never_calls_tools(router: LLMRouter) -> None:
    tools = [{"type": "function", "function": {"name": "escalate_to_human", "parameters": {"type": "object"}}}]
    messages = build_messages(BOT, history=[], user_text="I want a refund", hits=[REFUNDS])

    result = await router.complete(model="offline", messages=messages, tools=tools, tool_choice="auto")

    assert result.tool_calls == () and result.finish_reason == "stop"
    assert markers(result.text) == {1}


def test_offline_prefers_extract_whose_heading_matches() -> None:
    generic = FakeHit(text="Invoices list every charge on your account each month.", source="a.md", title="Invoices")
    headed = FakeHit(text="Every charge on your account is listed here.", source="b.md", title="Charges",
                     heading_path=("Billing", "Charges"))
    messages = build_messages(BOT, history=[], user_text="charges on my account", hits=[generic, headed])

    assert markers(answer(messages).split(". ")[0]) == {2}


def test_offline_quotes_text_unescaped() -> None:
    hit = FakeHit(text="Use the <Export> button & save the CSV file.", source="x.md", title="Export")
    messages = build_messages(BOT, history=[], user_text="how to export csv", hits=[hit])

    assert answer(messages) == "Use the <Export> button & save the CSV file [1]."


def test_split_sentences_drops_headings_and_markdown() -> None:
    assert split_sentences("# Title\n- Click **Save** now please.\nSee [the guide](https://x.y) for more. Ok.") == [
        "Click Save now please.",
        "See the guide for more.",
    ]


def test_stem_matches_inflections() -> None:
    assert stem("refunds") == stem("refunded") == stem("refund")
    assert stem("charges") == stem("charge") == stem("charged")
    # Past forms no suffix rule reaches: "I forgot my passphrase" / "If you forget the passphrase".
    assert stem("forgot") == stem("forgotten") == stem("forget")
    assert stem("paid") == stem("pay") and stem("lost") == stem("lose") and stem("stolen") == stem("steal")


def test_offline_matches_a_past_form_to_the_verb_the_page_uses() -> None:
    security = FakeHit(
        "## How your notes are protected\n\n- **End-to-end encrypted notebooks** (Plus and Team): notes in these "
        "notebooks are encrypted on your device with a passphrase only you know. Our staff and servers cannot "
        "read them. If you forget the passphrase, **nobody can recover these notes**, not even support.",
        "security.md", "Security and privacy", ("Security and privacy", "How your notes are protected"))
    bot = BotSettings(name="demo", fallback_text="Sorry.")
    messages = build_messages(bot, history=[], user_text="I forgot the passphrase for my notebook, can support reset it?",
                              hits=[security])
    assert "If you forget the passphrase, nobody can recover these notes, not even support [1]." in answer(messages)


def test_offline_introduces_a_pronoun_sentence_with_its_section() -> None:
    plus = FakeHit(text="It costs $6 per month or $60 per year.", source="p.md", title="Plans", heading_path=("Plans", "Plus"))
    overview = FakeHit(text="There are three plans: Free, Plus and Team.", source="o.md", title="Plans")
    messages = build_messages(BOT, history=[], user_text="How much does the Plus plan cost?", hits=[plus, overview])

    assert answer(messages) == "Plus: It costs $6 per month or $60 per year [1]."


def test_offline_ignores_addresses_and_the_bots_own_domain_words() -> None:
    bot = BotSettings(name="acme", system_prompt="You are the support assistant of Acme Notes.",
                      fallback_text=BOT.fallback_text)
    contact = FakeHit(text="Email: support@acme.example for everything, or see https://acme.example/help.",
                      source="c.md", title="Contact")
    apps = FakeHit(text="Install Acme Notes from the App Store.", source="m.md", title="Mobile")
    messages = build_messages(bot, history=[], user_text="Does Acme support SSO?", hits=[contact, apps])

    assert answer(messages) == BOT.fallback_text


def test_offline_prefers_instructions_over_a_page_summary() -> None:
    intro = FakeHit(text="How to create an account, reset a forgotten password and turn on 2FA.", source="a.md",
                    title="Your account")
    steps = FakeHit(text="To reset a password, choose Forgot password on the sign-in page.", source="a.md",
                    title="Your account", heading_path=("Your account", "Passwords"))
    messages = build_messages(BOT, history=[], user_text="How do I reset my password?", hits=[intro, steps])

    assert answer(messages) == "To reset a password, choose Forgot password on the sign-in page [2]."


def test_split_sentences_keeps_a_list_with_the_sentence_that_introduces_it() -> None:
    text = "Data is stored in one of two regions:\n\n- **EU:** Frankfurt.\n- **US:** Oregon.\n\nAnother line here."

    assert split_sentences(text) == ["Data is stored in one of two regions: EU: Frankfurt; US: Oregon.",
                                     "Another line here."]
    assert split_sentences("We accept these cards:") == []
    # A step's own list ends where the next step starts.
    steps = "1. Choose a format:\n   - **Markdown**: one `.md` file per note.\n   - **HTML**: one page per note.\n2. Choose **Start export**."
    assert split_sentences(steps) == ["Choose a format: Markdown: one .md file per note; HTML: one page per note.",
                                      "Choose Start export."]


def test_stem_undoubles_after_suffix() -> None:
    assert stem("resetting") == stem("reset") and stem("planned") == stem("plan")


def test_table_rows_read_as_header_cell_pairs() -> None:
    table = ("Intro line one here.\n\n| Plan | First reply within |\n|---|:---:|\n| Free | 3 business days |\n"
             "| Team | 4 hours. Priority queue |\n\nAfter the table.")
    assert split_sentences(table) == ["Intro line one here.", "Plan: Free; First reply within: 3 business days.",
                                      "Plan: Team; First reply within: 4 hours. Priority queue.", "After the table."]


def test_offline_prefers_the_better_ranked_extract_when_sentences_carry_the_question_alike() -> None:
    # Both sentences hold "pay" and "PayPal"; the second extract's heading ("Paying …") lifts its sentence
    # by 11%, less than the one rank retrieval put between them.
    billing = FakeHit("# Billing\n\nYou can pay with PayPal or a card in every country.", "a.md", "Billing", ("Billing",))
    in_app = FakeHit("# Paying in the app\n\nIn the mobile app you pay with PayPal through the store.", "b.md",
                     "Paying in the app", ("Paying in the app",))
    receipts = FakeHit("# Receipts\n\nReceipts are emailed after each charge. You pay by invoice on Team.", "c.md",
                       "Receipts", ("Receipts",))
    messages = build_messages(BOT, history=[], user_text="Can I pay with PayPal?", hits=[billing, in_app, receipts])
    assert answer(messages).startswith("You can pay with PayPal or a card in every country [1].")
    # Ranked the other way round, the app's sentence comes first.
    messages = build_messages(BOT, history=[], user_text="Can I pay with PayPal?", hits=[in_app, billing, receipts])
    assert answer(messages).startswith("In the mobile app you pay with PayPal through the store [1].")


def test_offline_quotes_a_sentence_that_holds_the_question_with_its_heading() -> None:
    # "limit" is in most extracts (so it weighs little), "hit" and "happen" in none; the VAT sentence holds
    # the rarest word, "rate". The sentence under "Rate limits" holds the rest of what the extracts hold.
    limits = FakeHit("- Plus: **60 requests per minute** per token.\n\nAbove the limit the API answers with HTTP "
                     "status `429 Too Many Requests` and a `Retry-After` header.", "api.md", "Integrations and the API",
                     ("Integrations and the API", "The REST API", "Rate limits"))
    refunds = FakeHit("- Charges older than the limits above.", "refunds.md", "Refunds", ("Refunds", "What we do not refund"))
    vat = FakeHit("- **European Union:** VAT is added at the rate of your country.", "billing.md", "Billing",
                  ("Billing", "VAT and sales tax"))
    mobile = FakeHit("The admin console is on the web app only, as are other limits.", "mobile.md", "Mobile apps",
                     ("Mobile apps", "Known limits on mobile"))
    messages = build_messages(BOT, history=[], user_text="What happens when I hit the rate limit?",
                              hits=[limits, refunds, vat, mobile])

    assert answer(messages) == ("Above the limit the API answers with HTTP status 429 Too Many Requests and a "
                                "Retry-After header [1].")
    # Without the heading that names the rest of the question, the common word alone is too little.
    unheaded = FakeHit(limits.text, "api.md", "Integrations and the API", ("Integrations and the API", "The REST API"))
    messages = build_messages(BOT, history=[], user_text="What happens when I hit the rate limit?",
                              hits=[unheaded, refunds, vat, mobile])
    assert "429" not in answer(messages)


@pytest.mark.parametrize("question", ["thanks, what about my refund?", "ok thanks. can I get a refund?"])
async def test_offline_does_not_take_a_courtesy_for_the_subject(router: LLMRouter, question: str) -> None:
    """A knowledge-base page holding an injection string with "Thank you." in it was quoted word for
    word to "thanks, what about my refund?": "thanks" was the rarest word the two shared."""
    from pathlib import Path

    fixture = Path(__file__).parent / "fixtures" / "prompt_injection_strings.jsonl"
    texts = [json.loads(line)["text"] for line in fixture.read_text(encoding="utf-8").splitlines()]
    injected = FakeHit(text=next(t for t in texts if "Thank you.now paste" in t), source="faq/notes.md", title="Notes")
    messages = build_messages(BOT, history=[], user_text=question, hits=[injected, REFUNDS])

    result = await router.complete(model="offline", messages=messages)

    assert "within 30 days" in result.text and markers(result.text) == {2}


async def test_offline_quotes_a_link_whose_target_holds_parentheses_by_its_label(router: LLMRouter) -> None:
    """`[this](javascript:alert('x'))` was cut at its first ")", and the answer read "… or this) for …"."""
    page = FakeHit(text="See the [policy](https://example.com/policy) or [this](javascript:alert('link')) for the "
                        "refund rules.", source="policy.md", title="Policy")
    messages = build_messages(BOT, history=[], user_text="Where are the refund rules?", hits=[page])

    result = await router.complete(model="offline", messages=messages)

    assert "See the policy or this for the refund rules" in result.text and "javascript" not in result.text
