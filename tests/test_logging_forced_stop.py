"""A second Ctrl-C cuts the graceful stop short: one line, not uvicorn's lifespan traceback."""

from __future__ import annotations

import asyncio
import logging
import traceback

from gateway.observability.logs import configure_logging


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
