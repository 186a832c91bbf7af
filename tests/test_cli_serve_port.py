"""`gateway serve` on a port something else listens on, or a host that does not resolve: one line before
anything starts."""

from __future__ import annotations

import asyncio
import signal
import socket

import pytest

from gateway.errors import GatewayError
from gateway.preflight import require_free_port
from tests.conftest import write_config
from tests.scale.replicas import Replica
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
    said = [line for line in proc.stderr.strip().splitlines() if "gateway.starting" not in line]
    assert said == [
        f"error: cannot listen on 127.0.0.1:{port}: Address already in use (another `gateway serve`, or another "
        "program?): stop it, or give another --port (PORT=… with make run)"], proc.stderr


def test_serve_on_an_index_a_chat_holds_names_the_commands_that_hold_one(tmp_path):
    # A `gateway chat` left open in another terminal holds the folder, and serve spoke only of "a running
    # `gateway serve`, or an ingest".
    import fcntl

    config = write_config(tmp_path)
    assert _run("db", "upgrade", "--config", str(config)).returncode == 0
    (tmp_path / "qdrant").mkdir()
    with open(tmp_path / "qdrant" / ".lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as local mode holds it
        proc = _run("serve", "--config", str(config), "--port", "1", timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: the Qdrant folder {tmp_path / 'qdrant'} is in use by another process (a `gateway chat` or "
        "`gateway ingest`, or a `gateway serve`). Stop it first, or use a Qdrant server (qdrant.url) to run more "
        "than one process on one index (`--role web` processes hold no index)")


def test_a_host_that_does_not_resolve_is_named():
    with pytest.raises(GatewayError, match=r"^cannot listen on no-such-host\.invalid:8000: .*: check --host"):
        require_free_port("no-such-host.invalid", 8000)


@pytest.mark.timeout(300)  # importing a server takes long on a loaded machine
def test_serve_says_it_is_starting_before_the_seconds_of_loading(tmp_path):
    # `make run` printed the serve command and then nothing for 5-30 s (checks, imports, models) until
    # uvicorn's first line: a first install could not tell a slow start from a hung one.
    config = write_config(tmp_path, log_level="INFO")
    assert _run("db", "upgrade", "--config", str(config)).returncode == 0
    server = Replica(config, role="web")
    port = server.port
    server.start()
    try:
        asyncio.run(server.wait_ready(timeout=240))
        server.proc.send_signal(signal.SIGINT)
        server.proc.wait(timeout=60)
    finally:
        server.kill()
    lines = server.log_path.read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if "Started server process" in line)
    starting = [line for line in lines[:first] if "gateway.starting" in line]
    assert len(starting) == 1 and f"url=http://127.0.0.1:{port}" in starting[0], lines
    assert f"config={config}" in starting[0] and "role=web" in starting[0]
    started = next(line for line in lines if "gateway.started" in line)
    assert f"url=http://127.0.0.1:{port}" in started
    # The console's address was only in the README: the line a first run ends on names it too.
    assert f"console=http://127.0.0.1:{port}/operator" in started


def test_a_config_without_bots_is_said_by_serve_chat_and_ingest(tmp_path, capsys):
    """An empty config.yaml (a file not saved yet, `bots:` left out) started a server that answered nothing, its
    log saying only `bots=[]`, `gateway chat` said "error: no bots configured", naming no file, and `gateway
    ingest` "nothing to ingest: no source is configured for it", naming neither the file nor that it has no bot."""
    import json

    from gateway.app import create_app
    from gateway.cli import main
    from gateway.settings import load_settings

    config = write_config(tmp_path, bots=[], log_format="json")
    assert main(["db", "upgrade", "--config", str(config)]) == 0
    capsys.readouterr()
    create_app(load_settings(config), start_worker=False, start_scheduler=False, start_channels=False)
    logs = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    assert [(e["level"], e["config"]) for e in logs if e["event"] == "gateway.no_bots"] == [("warning", str(config))]
    assert main(["chat", "--config", str(config)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: no bots configured in {config}: add one under `bots:` (README.md, Configuration)")
    assert main(["ingest", "--config", str(config)]) == 0  # nothing went wrong: a cron job stays quiet
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"nothing to ingest: no bots configured in {config}: add one under `bots:` (README.md, Configuration)")


@pytest.mark.parametrize("port", ["99999", "-1", "65536", "''", "'abc'"])
def test_a_port_out_of_range_is_a_usage_error_before_anything_starts(tmp_path, capsys, port):
    """`--port 99999` (or `make run PORT=99999`) started the worker, scheduler and index, then ended in three
    tracebacks, "OverflowError: bind(): port must be 0-65535": the probe of a free port wrapped it to 34463. One
    that is no number (`make run PORT=` with an unset variable) was argparse's "invalid int value: ''", with no
    word of PORT."""
    from gateway.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["serve", "--config", str(write_config(tmp_path)), "--port", port.strip("'")])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].endswith(
        f"argument --port: {port} is not a port: give a number from 1 to 65535 (PORT=… with make run)"), err
    assert "Traceback" not in err and "gateway.starting" not in err
