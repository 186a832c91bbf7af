"""Why an operator thread's posts could not be deleted is stored (`purged_operator_threads.why`) and printed by
`gateway forget`: an exception quoting the bot's token, held by the gateway, is stored and printed redacted."""

from __future__ import annotations

from gateway.observability.logs import configure_logging
from gateway.operators.slack_forget import _why

TOKEN = "xoxb-purge-only-0123456789abcdef"


def test_why_a_thread_was_left_quotes_no_secret_the_gateway_holds():
    configure_logging(level="WARNING", secrets=[TOKEN])
    try:
        why = _why(RuntimeError(f"POST https://slack.example/api/chat.delete?token={TOKEN}: connection reset"))
        assert TOKEN not in why and "connection reset" in why
    finally:
        configure_logging(level="WARNING")
