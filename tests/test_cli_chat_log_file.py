"""`gateway chat` with the bot loaded here: the server's warnings (llm.call_failed) were printed between the
prompts, in the middle of the chat; they go to a log file, named once before the chat."""

from __future__ import annotations

import logging

import structlog

from gateway.cli import main
from gateway.observability.logs import configure_logging
from tests.conftest import write_config


def test_chat_without_a_server_writes_the_warnings_to_a_log_file(tmp_path, capsys, monkeypatch):
    config = write_config(tmp_path)
    assert main(["db", "upgrade", "--config", str(config)]) == 0

    async def converse(bot, ask, follow=None, **_):
        structlog.get_logger("gateway.llm").warning("llm.call_failed", model="main", error="boom")
        logging.getLogger("litellm").warning("a library's warning")
        print("acme> hello")
        return 0

    monkeypatch.setattr("gateway.terminal_chat.converse", converse)
    try:
        assert main(["chat", "--config", str(config)]) == 0
        out, err = capsys.readouterr()
    finally:
        configure_logging(level="WARNING")  # stderr again for the tests after
    log_file = tmp_path / "chat.log"  # next to the index folder (qdrant.path)
    assert "model=main" not in out + err and "a library's warning" not in out + err
    assert f"note: its log lines (warnings such as llm.call_failed) go to {log_file}, not this screen" in err
    logged = log_file.read_text()
    assert "llm.call_failed" in logged and "a library's warning" in logged


def test_the_log_file_is_the_callers_to_give_and_a_later_configuration_writes_to_stderr_again(tmp_path, capsys):
    log_file = tmp_path / "sub" / "chat.log"
    try:
        configure_logging(level="WARNING", log_file=log_file)
        structlog.get_logger("gateway.llm").warning("to.the.file")
        logging.getLogger("litellm").warning("a library's line to the file")
        configure_logging(level="WARNING")
        structlog.get_logger("gateway.llm").warning("to.stderr")
        logging.getLogger("litellm").warning("a library's line to stderr")
    finally:
        configure_logging(level="WARNING")
    err = capsys.readouterr().err
    logged = log_file.read_text()
    assert "to.the.file" in logged and "a library's line to the file" in logged
    assert "to.stderr" not in logged and "a library's line to stderr" not in logged
    assert "to.stderr" in err and "a library's line to stderr" in err and "to.the.file" not in err
