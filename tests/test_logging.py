"""Standard-library log records (rag/, uvicorn) render like structlog's, `extra=` fields included."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
import structlog

from gateway.observability.logs import configure_logging


def test_stdlib_records_keep_their_extra_fields_in_console_and_json(capsys) -> None:
    configure_logging(level="INFO", secrets=["hunter2-secret"])
    logging.getLogger("rag.ingest").info("ingest.done", extra={"bot": "acme", "added": 3, "key": "hunter2-secret"})
    console = capsys.readouterr().err
    assert "ingest.done" in console and "added=3" in console and "bot=acme" in console
    assert "hunter2-secret" not in console

    configure_logging(level="INFO", fmt="json")
    logging.getLogger("rag.ingest").warning("ingest.source_failed", extra={"source": "site"})
    [line] = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    assert line["event"] == "ingest.source_failed" and line["source"] == "site" and line["logger"] == "rag.ingest"


def test_attributes_libraries_put_on_every_record_are_not_printed(capsys) -> None:
    configure_logging(level="INFO")
    logging.getLogger("tests.logging.uvicorn_like").info("Started server process [%d]", 7, extra={"color_message": "\x1b[36m7\x1b[0m"})
    line = capsys.readouterr().err
    assert "Started server process [7]" in line and "color_message" not in line


def test_litellm_records_come_out_once_as_json(capfd) -> None:
    # LiteLLM attaches a colored text handler to its loggers on import: each record came out twice,
    # once as a raw text line inside the JSON log.
    import gateway.llm  # noqa: F401 - imports LiteLLM, as serve does

    configure_logging(level="INFO", fmt="json")
    logging.getLogger("LiteLLM Router").warning("deployment cooled down")
    logging.getLogger("LiteLLM Router").info("litellm.acompletion(model=offline/extractive) 200 OK")
    lines = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and json.loads(lines[0])["event"] == "deployment cooled down"


def test_twilios_per_request_header_dump_stays_out_of_the_info_log(capsys) -> None:
    """twilio's client logs every request's headers at INFO: 8 lines a send, half of a busy log (review)."""
    configure_logging(level="INFO")
    logging.getLogger("twilio.http_client").info("-- BEGIN Twilio API Request --")
    logging.getLogger("twilio.http_client").warning("a real warning")
    err = capsys.readouterr().err
    assert "BEGIN Twilio API Request" not in err and "a real warning" in err


def test_a_urls_password_is_redacted_even_when_no_config_names_it(capsys) -> None:
    """A tool's exception quoted its own DSN, password and all, into `tool.failed` (review)."""
    import structlog

    configure_logging(level="INFO")
    try:
        raise ConnectionError("could not connect to postgresql://billing:s3cret-pw@db.internal:5432/billing")
    except ConnectionError as exc:
        structlog.get_logger("gateway.tools").error("tool.failed", tool="boom", error=str(exc), exc_info=exc)
    logging.getLogger("rag.crawl").warning("fetch failed: redis://:pw-9876@cache:6379 and https://user@host/x")
    out = capsys.readouterr().err
    assert "s3cret-pw" not in out and "pw-9876" not in out
    assert "postgresql://billing:[REDACTED]@db.internal:5432/billing" in out and "redis://:[REDACTED]@cache" in out
    assert "https://user@host/x" in out  # a user name alone is no secret


def test_debug_logs_leave_out_the_markdown_parsers_per_rule_lines(capsys) -> None:
    """At DEBUG (what an operator turns on to find a fault) markdown-it logged every rule it tried on every
    block of every reply rendered: 20 lines for a one-sentence Telegram answer, more than the turn's own."""
    import structlog

    configure_logging(level="DEBUG")
    logging.getLogger("markdown_it.rules_block.fence").debug("entering fence: StateBlock(line=0), 0, 1, False")
    structlog.get_logger("gateway.outbox").debug("outbound.debug_probe")
    err = capsys.readouterr().err
    assert "entering fence" not in err and "outbound.debug_probe" in err


def test_a_phone_number_is_logged_by_its_last_digits_wherever_it_appears(capsys) -> None:
    """A WhatsApp chat is the customer's number: `whatsapp.sent` and Twilio's own error texts carried it whole."""
    import structlog

    configure_logging(level="INFO")
    structlog.get_logger("gateway.outbox").warning(
        "outbound.failed", error="The 'To' number whatsapp:+14155550123 is not a valid phone number", chat="+491511234567")
    logging.getLogger("rag.crawl").info("fetched at 2026-12-06T10:00:00+00:00 with E-SYNC-409 and +1234 in 42 ms")
    out = capsys.readouterr().err
    assert "whatsapp:+…0123 is not a valid" in out and "chat=+…4567" in out
    assert "4155550123" not in out and "91511234567" not in out
    assert "2026-12-06T10:00:00+00:00 with E-SYNC-409 and +1234 in 42 ms" in out  # no phone number: as written


def test_control_characters_in_a_field_neither_reach_the_terminal_nor_forge_a_line(capsys) -> None:
    """A sitemap's `<loc>` on another site is logged as the skipped `example`: its owner wrote it, and an
    escape sequence in it reached the terminal of whoever read the log (or ran `gateway ingest`), and a
    newline in it began a line of its own that looked like the gateway's."""
    planted = "https://other.example/\x1b]52;c;ZXZpbA==\x07\n2026-12-06T00:00:00Z [critical ] admin.token_leaked"
    for fmt in ("console", "cli"):
        configure_logging(level="INFO", fmt=fmt)
        logging.getLogger("rag.crawl").warning("sitemap.other_sites_skipped", extra={"example": planted})
        out = capsys.readouterr().err
        assert "\x1b" not in out and "\x07" not in out and "\n2026-12-06T00:00:00Z" not in out, fmt
        assert "https://other.example/\\x1b]52;c;ZXZpbA==\\x07\\n2026-12-06" in out, fmt

    configure_logging(level="INFO", fmt="json")  # JSON escapes them itself: the value stays as it came
    logging.getLogger("rag.crawl").warning("sitemap.other_sites_skipped", extra={"example": planted})
    [line] = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    assert line["example"] == planted


def test_a_discord_interaction_token_in_a_follow_up_url_is_redacted(capsys) -> None:
    """An `/ask`'s token is in its follow-up's URL (`/webhooks/{application_id}/{token}`) and posts as the bot
    for 15 minutes; no config names it. The gateway's own webhook paths (`/webhooks/{bot}/discord/…`) stay."""
    configure_logging(level="INFO")
    token = "aW50ZXJhY3Rpb246MTIzNDU2Nzg5MDpBQkNERUZHSElKS0xNTk9QUVJTVFVWV1hZWg"
    logging.getLogger("aiohttp.client").warning(
        f"POST https://discord.com/api/v10/webhooks/1100000000000000002/{token}/messages/12?wait=true failed; "
        "POST /webhooks/123/discord/interactions")
    out = capsys.readouterr().err
    assert token not in out and "/webhooks/1100000000000000002/[REDACTED]/messages/12" in out
    assert "/webhooks/123/discord/interactions" in out


def test_control_characters_in_a_librarys_message_neither_reach_the_terminal_nor_forge_a_line(capsys) -> None:
    """A library formats what others wrote into its message itself (`logger.warning("…: %s", body)`): on
    the console that message came out as it was, so a newline in it began a line that looked like the
    gateway's, and an escape sequence reached the reader's terminal. A traceback keeps its lines."""
    planted = "refused\x1b[2J\n2026-12-06T00:00:00Z [critical ] admin.token_leaked"
    configure_logging(level="INFO", fmt="console")
    logging.getLogger("some.library").warning("the provider answered: %s", planted)
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("some.library").exception("call failed")
    out = capsys.readouterr().err
    assert "\x1b" not in out and "\n2026-12-06T00:00:00Z" not in out
    assert "the provider answered: refused\\x1b[2J\\n2026-12-06T00:00:00Z" in out
    assert "Traceback (most recent call last):\n" in out


@pytest.mark.parametrize("fmt", ["console", "cli"])
def test_an_escape_sequence_in_an_exceptions_message_does_not_reach_the_terminal(capsys, fmt) -> None:
    """An exception's message quotes what others wrote (a provider's error body): in the traceback under
    a line it reached the terminal as it was, an OSC 52 writing the reader's clipboard. Its lines stay."""
    configure_logging(level="INFO", fmt=fmt)
    for logger in (logging.getLogger("some.library"), structlog.get_logger()):
        try:
            raise ValueError("the provider said: \x1b]52;c;ZXZpbA==\x07 no")
        except ValueError:
            logger.exception("call_failed")
    out = capsys.readouterr().err
    assert "\x1b" not in out and "\x07" not in out
    assert out.count("ValueError: the provider said: \\x1b]52;c;ZXZpbA==\\x07 no\n") == 2
    assert out.count("Traceback (most recent call last):\n") == 2


def test_a_traceback_a_library_logs_as_its_message_keeps_its_lines() -> None:
    """uvicorn logs a failed start's traceback (Starlette's `traceback.format_exc()`) as a record's message,
    before 'Application startup failed': written on one line, `\\n  File …` and all, the one error that says why
    `serve` did not start could not be read. It keeps its lines, its control characters still escaped. (In a
    process of its own, as `serve` runs: a fake server an earlier test started here leaves uvicorn's loggers
    configured its way.)"""
    program = "\n".join([
        "import logging, traceback",
        "from gateway.observability.logs import configure_logging",
        "configure_logging(level='INFO', fmt='console')",
        "try:",
        "    raise RuntimeError('the index could not start \\x1b[2J')",
        "except RuntimeError:",
        "    logging.getLogger('uvicorn.error').error(traceback.format_exc())",
    ])
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[1]).stderr
    assert "Traceback (most recent call last):" in out and "\n  File " in out
    assert out.endswith("RuntimeError: the index could not start \\x1b[2J\n") and "\x1b" not in out


def test_a_secret_a_field_was_cut_short_inside_is_redacted_with_no_part_of_it_left(capsys) -> None:
    """Many fields are cut before they are logged (`error=str(exc)[:200]`): a token quoted across the cut left
    its first part, which no longer matched the token, in the log."""
    import structlog

    token = "723738643:AAH-cut-TOKEN-7f3kQ9"
    configure_logging(level="INFO", secrets=[token])
    quoted = f"Cannot connect to https://api.telegram.example/bot{token}/sendMessage"
    structlog.get_logger("gateway.outbox").warning("outbound.channel_paused", error=quoted[:60])
    structlog.get_logger("gateway.llm").warning("llm.call_failed", error=quoted[:62] + "…")
    logging.getLogger("gateway.delivery").warning("send failed: %s", quoted[:64])
    out = capsys.readouterr().err
    assert token[:6] not in out and out.count("[REDACTED]") == 3, out
    # A field that is only the token's first part (the bot's id, which starts a Telegram token) was not cut.
    structlog.get_logger("gateway.outbox").warning("outbound.sent", bot_id="723738643", chat="7237")
    assert "bot_id=723738643 chat=7237" in capsys.readouterr().err


def test_a_secret_cut_short_in_a_relayed_warnings_field_is_redacted_there_too(capsys) -> None:
    """The admin API's caller gets an ingest's warnings as one line, `event key=value …`, redacted whole: a
    field cut inside a secret ended its own value on the server's log, but not that line, so it kept its part."""
    from gateway.observability.relay import relay_to

    token = "723738643:AAH-cut-TOKEN-7f3kQ9"
    configure_logging(level="INFO", secrets=[token])
    quoted = f"Cannot connect to https://api.telegram.example/bot{token}/sendMessage"
    relayed: list[str] = []
    relaying = relay_to.set(lambda level, message: relayed.append(message))
    try:
        structlog.get_logger("gateway.knowledge").warning("source.page_failed", error=quoted[:60], source="wiki")
        logging.getLogger("rag.sources").warning("page failed", extra={"error": quoted[:60], "source": "wiki"})
    finally:
        relay_to.reset(relaying)
    assert len(relayed) == 2 and all("source=wiki" in line for line in relayed), relayed
    assert not any(token[:6] in line for line in relayed), relayed
    assert token[:6] not in capsys.readouterr().err
