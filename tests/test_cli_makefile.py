"""`make run` with a config path, host or port holding a space (review finding 8)."""

from __future__ import annotations

import shlex
import shutil
import subprocess

import pytest

from tests.conftest import ROOT


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_cli_makefile_passes_config_host_and_port_as_one_argument_each():
    variables = {"GATEWAY_CONFIG": "my conf.yaml", "HOST": "127.0.0.1 ", "PORT": "80 00"}
    # -n prints the recipes without running them; -B prints every one, installed or not.
    proc = subprocess.run(["make", "-n", "-B", "run", *(f"{k}={v}" for k, v in variables.items())], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    commands = [shlex.split(line) for line in proc.stdout.splitlines() if " -m gateway " in line]
    assert [argv[argv.index("gateway") + 1] for argv in commands] == ["db", "ingest", "serve"]
    for argv in commands:
        assert argv[argv.index("--config") + 1] == "my conf.yaml"
    serve = commands[-1]
    assert serve[serve.index("--host") + 1] == "127.0.0.1 " and serve[serve.index("--port") + 1] == "80 00"
