"""`gateway serve` on a port something else listens on, or a host that does not resolve: one line before
anything starts."""

from __future__ import annotations

import socket

import pytest

from gateway.errors import GatewayError
from gateway.preflight import require_free_port
from tests.conftest import write_config
from tests.test_cli import _run


def test_serve_on_a_busy_port_says_so_before_starting_anything(tmp_path):
    # uvicorn binds after the app's startup: the worker, scheduler and a startup ingest ran, stopped
    # again, and the bind error was one log line among theirs, exit 3.
    config = write_config(tmp_path, log_level="INFO")
    assert _run("db", "upgrade", "--config", str(config)).returncode == 0
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = _run("serve", "--config", str(config), "--host", "127.0.0.1", "--port", str(port), timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"error: cannot listen on 127.0.0.1:{port}: Address already in use (another `gateway serve`, or another "
        "program?): stop it, or give another --port (PORT=… with make run)"], proc.stderr


def test_a_host_that_does_not_resolve_is_named():
    with pytest.raises(GatewayError, match=r"^cannot listen on no-such-host\.invalid:8000: .*: check --host"):
        require_free_port("no-such-host.invalid", 8000)
