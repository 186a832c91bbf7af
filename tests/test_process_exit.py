"""`serve` leaves without the interpreter's teardown once it has stopped: freeing LiteLLM's, qdrant-client's
and fastembed's modules one object at a time took 4-8 s after "Finished server process", so Ctrl-C in
`make run` held the terminal that long after the server had stopped."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT

SCRIPT = """
import atexit, sys, threading
from gateway.process_exit import exit_after_stop

class Teardown:
    def __del__(self):
        print("torn down", flush=True)

kept = Teardown()  # freed only by the interpreter's teardown of __main__
atexit.register(lambda: print("atexit ran", flush=True))
if sys.argv[1] == "busy":  # a thread still working: Python's own exit waits for it, so exit_after_stop must too
    threading.Thread(target=lambda: __import__("time").sleep(0.3)).start()
print("exiting", flush=True)
exit_after_stop(0)
print("returned", flush=True)
"""


def _run(mode: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT, mode], cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_exit_after_stop_runs_the_exit_handlers_and_skips_the_teardown():
    proc = _run("idle")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["exiting", "atexit", "ran"]


def test_exit_after_stop_leaves_a_process_with_a_working_thread_to_python():
    proc = _run("busy")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["exiting", "returned", "atexit ran", "torn down"]


def test_exit_after_stop_flushes_what_was_printed_and_logged_and_keeps_the_exit_code(tmp_path):
    """A pipe (make run's tee, a container's log) buffers stdout: os._exit alone drops what sits there,
    the last lines of the server's output and its log file's last records."""
    log = tmp_path / "gateway.log"
    script = ("import logging, sys\nfrom gateway.process_exit import exit_after_stop\n"
              f"logging.basicConfig(filename={str(log)!r})\n"
              "print('last line'); sys.stderr.write('last error'); logging.getLogger().warning('last record')\n"
              "exit_after_stop(3)\n")
    buffered = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env=buffered)
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "last line\n", "last error")
    assert log.read_text() == "WARNING:root:last record\n"
