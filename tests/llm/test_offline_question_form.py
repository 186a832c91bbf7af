"""The offline responder reads the question's form: a how-to question gets a section's steps, a question
named after a section its opening, "how long / how often" a duration or a frequency, and the words that
only frame a question ("work", "mean", "fix", "see", "include") are not looked for."""

from __future__ import annotations

import pytest

from gateway.offline.provider import answer
from gateway.offline.question_form import is_problem
from gateway.pipeline.prompts import build_messages
from gateway.settings import BotSettings
from tests.llm.hits import PLANS, FakeHit

BOT = BotSettings(name="demo", fallback_text="Sorry, our help center does not cover that.")


def test_offline_finds_the_steps_of_a_section_named_by_a_how_to_question() -> None:
    # The steps hold neither "turn" nor "2FA"; a side remark in the next section holds both.
    twofa = FakeHit(
        "## Two-factor authentication (2FA)\n\n### Turning on 2FA\n\n"
        "1. Go to **Settings → Security → Two-factor authentication**.\n"
        "2. Scan the QR code with an authenticator app.\n3. Enter the 6-digit code shown by the app.\n\n"
        "### Lost your phone or authenticator?\n\n"
        "- If you have no backup codes left, contact support. For your security, support can never turn off 2FA over chat.",
        "account.md", "Your account", ("Your account", "Two-factor authentication (2FA)"))
    messages = build_messages(BOT, history=[], user_text="How do I turn on 2FA?", hits=[PLANS, twofa])
    assert answer(messages) == (
        "Go to Settings → Security → Two-factor authentication [2]. Scan the QR code with an authenticator app [2]. "
        "Enter the 6-digit code shown by the app [2].")
    # A how-to question that no section is named after: the best sentence, as before.
    messages = build_messages(BOT, history=[], user_text="How do I turn off 2FA?", hits=[PLANS, twofa])
    assert "never turn off 2FA" in answer(messages)


def test_offline_steps_need_not_name_the_product() -> None:
    # "notes" is the product's word (the bot's instructions name it): "Exporting your data" answers it.
    bot = BotSettings(name="demo", fallback_text="Sorry.", system_prompt="You are the assistant of Acme Notes.")
    export = FakeHit(
        "## Exporting your data\n\n1. Sign in on the web app.\n2. Go to **Settings → Account → Export data**.\n"
        "3. Choose **Start export**.\n\nWe email you a download link for your notes when the export is ready.",
        "export.md", "Exporting your data", ("Exporting your data",))
    messages = build_messages(bot, history=[], user_text="How do I export my notes?", hits=[export, PLANS])
    assert answer(messages) == (
        "Sign in on the web app [1]. Go to Settings → Account → Export data [1]. Choose Start export [1].")


def test_offline_how_does_it_work_asks_about_its_subject() -> None:
    # Every extract is about refunds, so "work" would be the rarer, decisive word: the billing page's
    # table of contents ("how taxes work") would be quoted.
    billing = FakeHit("# Billing and payments\n\nThis page explains how we charge you and how taxes work. "
                      "For refunds, see the Refunds page.", "billing.md", "Billing and payments", ("Billing and payments",))
    renewals = FakeHit("# Refunds\n\n## Renewals\n\nYearly renewals are refunded in full within 30 days.",
                       "refunds.md", "Refunds", ("Refunds", "Renewals"))
    deletion = FakeHit("# Deleting your account\n\nA deletion cancels the plan but does not refund it.",
                       "delete.md", "Deleting your account", ("Deleting your account",))
    messages = build_messages(BOT, history=[], user_text="How do refunds work?", hits=[billing, renewals, deletion])
    assert answer(messages).startswith("Yearly renewals are refunded in full within 30 days [2].")


def test_offline_how_long_asks_for_a_duration_not_the_word_long() -> None:
    refunds = FakeHit("# Refunds\n\n## Timing\n\nRefunds take 5 to 10 business days to appear on a card statement.",
                      "refunds.md", "Refunds", ("Refunds", "Timing"))
    education = FakeHit("# Plans\n\n## Education\n\nStudents get Plus for free for as long as they remain eligible, "
                        "and their refunds follow the same rules.", "plans.md", "Plans", ("Plans", "Education"))
    messages = build_messages(BOT, history=[], user_text="How long do refunds take?", hits=[refunds, education])
    assert answer(messages) == "Refunds take 5 to 10 business days to appear on a card statement [1]."


def test_offline_a_word_every_extract_shares_counts_when_it_is_all_the_question_has() -> None:
    # No extract says "policy": "refund", in all of them, is the only evidence, so it keeps its weight.
    hits = [FakeHit(f"# Refunds\n\n## {title}\n\n{text}", "refunds.md", "Refunds", ("Refunds", title)) for title, text in [
        ("Guarantee", "Your first payment is fully refundable within 14 days of the charge."),
        ("Renewals", "Yearly renewals are refunded in full within 30 days of the renewal date."),
        ("Team seats", "Removing seats does not give a cash refund but a credit."),
    ]]
    messages = build_messages(BOT, history=[], user_text="Explain the refund policy", hits=hits)
    assert answer(messages) != BOT.fallback_text and "[" in answer(messages)


SUPPORT = FakeHit(
    "## Support hours\n\nMonday to Friday, **08:00 to 20:00 CET**, except public holidays in Germany. "
    "Email and chat messages sent outside these hours are answered on the next business day.\n\n"
    "## Response times\n\nFree plans get a first reply within 3 business days.",
    "contact.md", "Contacting support", ("Contacting support",))


def test_offline_a_question_named_after_a_section_gets_its_opening() -> None:
    # The opening holds no word of the question; the side remark after it holds "hours".
    messages = build_messages(BOT, history=[], user_text="What are your support hours?", hits=[PLANS, SUPPORT])
    assert answer(messages) == (
        "Monday to Friday, 08:00 to 20:00 CET, except public holidays in Germany [2]. "
        "Email and chat messages sent outside these hours are answered on the next business day [2].")
    # A word no heading names ("messages") makes it a question about a detail: the best sentence.
    messages = build_messages(BOT, history=[], user_text="Are messages sent outside support hours answered?",
                              hits=[PLANS, SUPPORT])
    assert answer(messages) == "Email and chat messages sent outside these hours are answered on the next business day [2]."


@pytest.mark.parametrize("question", ["What does E-SYNC-409 mean?", "E-SYNC-409 what does it mean",
                                      "E-SYNC-409 what does this mean??", "what is the meaning of E-SYNC-409?"])
def test_offline_what_does_a_code_mean_gets_the_section_about_the_code(question: str) -> None:
    # "mean" frames the question; without dropping it, the side remark that names the code would win.
    mobile = FakeHit("## Offline notes\n\nChanges made offline sync later. If the note changed elsewhere, "
                     "you get a conflicted copy (error `E-SYNC-409`).", "mobile.md", "Mobile apps", ("Mobile apps",))
    sync = FakeHit("## Error codes\n\n### E-SYNC-409: conflicting edits\n\nThe same note was changed on two "
                   "devices while one of them was offline. Nothing is lost: the app keeps both versions.",
                   "sync.md", "Troubleshooting sync errors", ("Troubleshooting sync errors",))
    messages = build_messages(BOT, history=[], user_text=question, hits=[mobile, sync])
    assert answer(messages) == ("The same note was changed on two devices while one of them was offline [2]. "
                                "Nothing is lost: the app keeps both versions [2].")


def test_offline_how_often_prefers_a_sentence_that_gives_a_frequency() -> None:
    # "sync" is in every extract, so "run", which only the exports sentence holds, used to decide.
    sync = FakeHit("# Sync\n\nAcme syncs your notes every few seconds while you are online. Sync errors show a red icon.",
                   "sync.md", "Troubleshooting sync", ("Troubleshooting sync",))
    mobile = FakeHit("# Mobile\n\nNotes sync when the phone is online again.", "mobile.md", "Mobile apps", ("Mobile apps",))
    export = FakeHit("# Export\n\nYou can run up to 3 exports per day. Exports include synced notes only.",
                     "export.md", "Export", ("Export",))
    messages = build_messages(BOT, history=[], user_text="How often does sync run?", hits=[export, mobile, sync])
    assert answer(messages) == "Acme syncs your notes every few seconds while you are online [3]."


def test_offline_how_long_finds_the_duration_in_the_section_it_names() -> None:
    # The duration never says "export" (the section's heading does); the steps and the limit do.
    export = FakeHit(
        "## Exporting your data\n\n1. Go to **Settings → Export data**.\n2. Choose **Start export**.\n\n"
        "We email you a download link when it is ready, usually within 24 hours. You can run up to 3 exports a day.",
        "export.md", "Export and delete", ("Export and delete", "Exporting your data"))
    messages = build_messages(BOT, history=[], user_text="How long does an export take?", hits=[export, PLANS])
    assert answer(messages).startswith("We email you a download link when it is ready, usually within 24 hours [1].")


def test_offline_a_sentence_opening_with_a_pronoun_is_about_the_one_before() -> None:
    # "They take 5 to 10 business days" never says "refunds"; the sentence before it does.
    refunds = FakeHit("# Refunds\n\n## Timing\n\nRefunds go back to the original payment method. They take 5 to 10 "
                      "business days to appear.\n\nWe refund bank transfers by bank transfer.",
                      "refunds.md", "Refunds", ("Refunds", "Timing"))
    messages = build_messages(BOT, history=[], user_text="How long do refunds take?", hits=[refunds])
    assert answer(messages) == ("Refunds go back to the original payment method [1]. "
                                "They take 5 to 10 business days to appear [1].")


def test_offline_does_it_work_asks_about_its_subject() -> None:
    mobile = FakeHit("# Mobile apps\n\n## Offline notes\n\nBy default the apps keep the notes you opened recently on "
                     "the device. Reminders work offline too.", "mobile.md", "Mobile apps", ("Mobile apps", "Offline notes"))
    messages = build_messages(BOT, history=[], user_text="Does the mobile app work offline?", hits=[mobile, PLANS])
    assert answer(messages).startswith("By default the apps keep the notes you opened recently on the device [1].")


RESET = FakeHit("## Resetting a forgotten password\n\n1. On the sign-in page, choose **Forgot password?**.\n"
                "2. Open the link we email you.\n3. Choose a new password.",
                "account.md", "Your account", ("Your account", "Resetting a forgotten password"))
DELETE = FakeHit("## Deleting your account\n\n1. Cancel any paid subscription first in **Settings → Billing**.\n"
                 "2. Go to **Settings → Account → Delete account**.", "delete.md", "Your data", ("Your data", "Deleting your account"))


def test_offline_a_step_comes_with_its_procedure_when_the_section_is_about_the_question() -> None:
    # Not a "how do I" question, but its best sentence is step 1 of the procedure it asks about.
    messages = build_messages(BOT, history=[], user_text="I forgot my password", hits=[RESET, DELETE])
    assert answer(messages) == ("On the sign-in page, choose Forgot password? [1]. Open the link we email you [1]. "
                                "Choose a new password [1].")
    # Step 1 of deleting an account answers "cancel my subscription"; the rest of that procedure does not.
    messages = build_messages(BOT, history=[], user_text="I want to cancel my subscription", hits=[RESET, DELETE])
    assert answer(messages) == "Cancel any paid subscription first in Settings → Billing [2]."


def test_offline_how_do_i_fix_a_code_gets_the_section_about_the_code() -> None:
    status = FakeHit("## E-SYNC-500: server error\n\nCheck the status page; your changes sync once the problem is fixed.",
                     "sync.md", "Sync errors", ("Sync errors",))
    large = FakeHit("## E-SYNC-413: attachment too large\n\nThe file is bigger than your plan allows. "
                    "Compress the file, split it, or upgrade.", "sync.md", "Sync errors", ("Sync errors",))
    messages = build_messages(BOT, history=[], user_text="How do I fix E-SYNC-413?", hits=[status, large])
    assert answer(messages) == ("The file is bigger than your plan allows [2]. "
                                "Compress the file, split it, or upgrade [2].")


def test_offline_where_can_i_see_asks_where_the_thing_is() -> None:
    billing = FakeHit("# Billing\n\nFor refunds, see the Refunds page.", "billing.md", "Billing", ("Billing",))
    invoices = FakeHit("# Billing\n\n## Invoices\n\nEvery charge creates an invoice. Download it in "
                       "**Settings → Billing → Invoices**.", "billing.md", "Billing", ("Billing", "Invoices"))
    messages = build_messages(BOT, history=[], user_text="Where can I see my invoices?", hits=[billing, invoices])
    assert answer(messages) == ("Every charge creates an invoice [2]. Download it in Settings → Billing → Invoices [2].")


def test_offline_a_hyphenated_word_matches_its_joined_spelling() -> None:
    discounts = FakeHit("# Plans\n\n## Discounts\n\n- **Education:** students get Plus for free.\n"
                        "- **Non-profits:** registered non-profit organisations get 50% off the Team plan.",
                        "plans.md", "Plans", ("Plans", "Discounts"))
    messages = build_messages(BOT, history=[], user_text="Do nonprofits get a discount?", hits=[discounts, PLANS])
    assert answer(messages) == "Non-profits: registered non-profit organisations get 50% off the Team plan [1]."


def test_offline_whats_included_asks_about_the_plan() -> None:
    # "including Free" holds both words; the section named after the plan holds neither "include" nor a list word.
    export = FakeHit("# Export\n\nYou can take a full copy at any time, on every plan, including Free.",
                     "export.md", "Export", ("Export",))
    free = FakeHit("# Plans\n\n## Free\n\nThe Free plan is free forever and needs no payment card. "
                   "It is meant for personal use on up to two devices.", "plans.md", "Plans", ("Plans", "Free"))
    messages = build_messages(BOT, history=[], user_text="What's included in the free plan?", hits=[export, free])
    assert answer(messages).startswith("The Free plan is free forever and needs no payment card [2].")


def test_offline_enable_and_log_in_find_turn_on_and_sign_in() -> None:
    twofa = FakeHit("## Turning on 2FA\n\n1. Go to **Settings → Security**.\n2. Scan the QR code.\n",
                    "account.md", "Your account", ("Your account", "Turning on 2FA"))
    locked = FakeHit("## Account temporarily locked\n\nAfter 10 failed sign-in attempts the account is locked "
                     "for 15 minutes.", "login.md", "Sign-in problems", ("Sign-in problems",))
    messages = build_messages(BOT, history=[], user_text="How do I enable 2FA?", hits=[locked, twofa])
    assert answer(messages) == "Go to Settings → Security [2]. Scan the QR code [2]."
    messages = build_messages(BOT, history=[], user_text="Why does it say locked when I log in?", hits=[twofa, locked])
    assert answer(messages) == "After 10 failed sign-in attempts the account is locked for 15 minutes [2]."


def test_offline_how_many_asks_for_a_number_not_the_word_use() -> None:
    # "use" is the rarest word of the question and "Active sessions" the only sentence that says it.
    devices = FakeHit("# Your account\n\n## Signed in on too many devices\n\nFree accounts sync on **2 devices**. "
                      "Plus and Team have no device limit.", "account.md", "Your account",
                      ("Your account", "Signed in on too many devices"))
    sessions = FakeHit("# Security\n\n## Suspicious activity\n\n**Settings → Security → Active sessions** lists every "
                       "device signed in to your account, with its location and last use.", "security.md", "Security",
                       ("Security", "Suspicious activity"))
    messages = build_messages(BOT, history=[], user_text="How many devices can I use?", hits=[devices, sessions])
    assert answer(messages).startswith("Free accounts sync on 2 devices [1].")


def test_offline_how_much_asks_for_an_amount_not_a_discount() -> None:
    team = FakeHit("# Plans and pricing\n\n## Team\n\nTeam is for companies and groups of 3 users or more. It costs "
                   "**$12 per user per month**.", "plans.md", "Plans and pricing", ("Plans and pricing", "Team"))
    discounts = FakeHit("# Plans and pricing\n\n## Discounts\n\nNon-profits get 50% off the Team plan.",
                        "plans.md", "Plans and pricing", ("Plans and pricing", "Discounts"))
    messages = build_messages(BOT, history=[], user_text="How much is the Team plan?", hits=[discounts, team])
    assert "It costs $12 per user per month [2]." in answer(messages)
    assert "50%" not in answer(messages)


def test_offline_can_i_use_asks_about_what_follows_use() -> None:
    # Only the side remark says "use"; the section's opening answers.
    offline = FakeHit("# Mobile apps\n\n## Offline notes\n\nOn Plus and Team, you can make a whole notebook available "
                      "offline. Offline notebooks use space on the device.", "mobile.md", "Mobile apps",
                      ("Mobile apps", "Offline notes"))
    messages = build_messages(BOT, history=[], user_text="Can I use the app offline?", hits=[offline, PLANS])
    assert answer(messages).startswith("On Plus and Team, you can make a whole notebook available offline [1].")


@pytest.mark.parametrize("question", ["I want a refund", "I'd like a refund please", "We need a refund"])
def test_offline_a_wish_asks_for_the_steps_as_how_do_i_does(question: str) -> None:
    # "want" is in no heading: read as a word to look for, it left the steps of "How to ask for a
    # refund" out, and the page's opening, which says "want", was quoted instead.
    refunds = FakeHit(
        "# Refunds\n\nWe want you to be happy with Acme Cloud Notes. This page explains when you can get your "
        "money back.\n\n## Renewals\n\n- **Monthly renewals** are not refunded.\n\n"
        "## How to ask for a refund\n\n1. Go to **Settings → Billing → Invoices** and note the invoice number.\n"
        "2. Contact support from **Help → Contact support**.\n3. Give the invoice number and, if you like, the reason.",
        "refunds.md", "Refunds", ("Refunds",))
    messages = build_messages(BOT, history=[], user_text=question, hits=[PLANS, refunds])
    assert answer(messages) == (
        "Go to Settings → Billing → Invoices and note the invoice number [2]. Contact support from Help → Contact "
        "support [2]. Give the invoice number and, if you like, the reason [2].")


def test_offline_a_wish_to_know_is_not_a_procedure() -> None:
    # "I want to know …" asks for a fact; "know" is in no heading, so no section's steps are taken for it.
    renewals = FakeHit("# Refunds\n\n## Renewals\n\nYearly renewals are refunded in full within 30 days.\n\n"
                       "## How to ask for a refund\n\n1. Note the invoice number.\n2. Contact support.",
                       "refunds.md", "Refunds", ("Refunds",))
    messages = build_messages(BOT, history=[], user_text="I want to know if yearly renewals are refunded",
                              hits=[renewals])
    assert answer(messages).startswith("Yearly renewals are refunded in full within 30 days [1].")


@pytest.mark.parametrize(("text", "told"), [
    ("the app keeps crashing on my iphone", True),
    ("sync is stuck", True),
    ("can't log in on my phone", True),  # "can't" is no "can": a problem told
    ("can\u2019t log in on my phone", True),  # the curly apostrophe phones type, read the same
    ("whats the difference between plus and team", False),
    ("tell me about the plus plan", False),
    ("is my data encrypted", False),
    ("the app crashes, why?", False),
    ("I want a refund", False),  # a wish: read as "How do I …?" (is_how_to)
])
def test_a_problem_told_is_no_question(text: str, told: bool) -> None:
    assert is_problem(text) is told


def test_offline_a_problem_told_gets_the_steps_of_the_first_passage() -> None:
    """'the app keeps crashing on my iphone': the sentence naming iPhone is about the mobile apps; the
    first passage's steps are what to do."""
    crashes = FakeHit(
        "## The app crashes or will not start\n\n### Steps that fix most crashes\n\n"
        "1. Update the app to the latest version.\n2. Restart the device.",
        "crashes.md", "Troubleshooting", ("Troubleshooting", "The app crashes or will not start"))
    mobile = FakeHit("# Mobile apps\n\nThe apps for iPhone and Android phones are free to download.",
                     "mobile.md", "Mobile apps", ("Mobile apps",))
    told = build_messages(BOT, history=[], user_text="the app keeps crashing on my iphone", hits=[crashes, mobile])
    assert answer(told) == "Update the app to the latest version [1]. Restart the device [1]."
    asked = build_messages(BOT, history=[], user_text="Does the app crash on my iphone?", hits=[crashes, mobile])
    assert answer(asked).startswith("The apps for iPhone")


def test_offline_what_is_the_limit_is_answered_with_an_amount() -> None:
    # "Above the limit …" holds more of the question's words ("API", "limit"), and a bare status code;
    # the question asks for the amount, which the Team line gives.
    limits = FakeHit(
        "### Rate limits\n\n- Plus: **60 requests per minute** per token.\n"
        "- Team: **300 requests per minute** per workspace.\n\n"
        "Above the limit the API answers with HTTP status `429 Too Many Requests` and a `Retry-After` header.",
        "api.md", "Integrations and the API", ("Integrations and the API", "The REST API", "Rate limits"))
    messages = build_messages(BOT, history=[], user_text="what's the API rate limit on Team", hits=[limits, PLANS])
    assert answer(messages) == "Team: 300 requests per minute per workspace [1]."
    # What happens past the limit asks for no amount: the 429 sentence answers it.
    messages = build_messages(BOT, history=[], user_text="What happens when I hit the API rate limit?",
                              hits=[limits, PLANS])
    assert answer(messages).startswith("Above the limit the API answers with HTTP status 429")


@pytest.mark.parametrize(("question", "asks_amount"), [
    ("What is the price of Plus?", True),
    ("whats the max file size on plus", True),
    ("What are the limits of the free plan?", True),
    ("What is the largest attachment size?", True),
    ("What happens when I hit the rate limit?", False),
    ("What is end-to-end encryption?", False),
])
def test_what_is_the_limit_or_price_asks_for_an_amount(question: str, asks_amount: bool) -> None:
    from gateway.offline.question_form import answer_kind

    kind = answer_kind(question)
    assert (kind is not None) == asks_amount
    if kind is not None:
        assert kind.search("Team: 300 requests per minute per workspace.")
        assert kind.search("It costs $6 per month.") and kind.search("25 MB on Free")
        assert not kind.search("Above the limit the API answers with HTTP status 429 Too Many Requests.")
