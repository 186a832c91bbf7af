"""Leaving a stopped server's process at once: the interpreter's teardown, which frees every module's
objects one at a time (LiteLLM's, qdrant-client's, fastembed's), took 4-8 s on 2 cores after the server
had stopped, holding the terminal after Ctrl-C in `make run` and a container's stop."""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading


def exit_after_stop(code: int) -> None:
    """End the process with `code` after the exit handlers (logging's flush, OpenTelemetry's export)
    ran, skipping the teardown. With a thread still working (not a daemon), Python's own exit waits
    for it, so this returns and leaves the exit to the caller."""
    if any(t is not threading.main_thread() and not t.daemon and t.is_alive() for t in threading.enumerate()):
        return
    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing left to say to it
            pass
    os._exit(code)
