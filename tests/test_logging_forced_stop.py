"""A second Ctrl-C cuts the graceful stop short: one line, not uvicorn's lifespan traceback."""

from __future__ import annotations

import asyncio
import logging
import traceback

import pytest

from gateway.observability.logs import configure_logging


@pytest.fixture(autouse=True)
def _uvicorn_loggers_as_serve_leaves_them(monkeypatch):
    """`gateway serve` starts uvicorn with `log_config=None`: its loggers propagate to ours. A test run before in
    the same process may have left them otherwise (a handler of their own, no propagation), and the line went
    there, not to the captured stderr (CI: "Traceback" not in '')."""
    for name in ("uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        monkeypatch.setattr(logger, "handlers", [])
        monkeypatch.setattr(logger, "propagate", True)
        monkeypatch.setattr(logger, "disabled", False)
        monkeypatch.setattr(logger, "level", logging.NOTSET)


def test_a_cancelled_lifespan_is_one_line_not_a_traceback(capsys) -> None:
    # Ctrl-C twice (or `timeout -s INT`, which signals the process and its group) made uvicorn skip the
    # lifespan's shutdown; the asyncio runner then cancelled it, and Starlette sent the traceback as
    # lifespan.shutdown.failed's message, which uvicorn logged at error: 40 lines after gateway.stopped.
    configure_logging(level="INFO")
    try:
        raise asyncio.CancelledError()
    except asyncio.CancelledError:
        logging.getLogger("uvicorn.error").error(traceback.format_exc())
    err = capsys.readouterr().err
    assert "Traceback" not in err and "CancelledError" not in err
    [line] = err.splitlines()
    assert "warning" in line and "stopped at once" in line


def test_another_lifespan_exception_keeps_its_traceback(capsys) -> None:
    configure_logging(level="INFO")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("uvicorn.error").error(traceback.format_exc())
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: boom" in err
