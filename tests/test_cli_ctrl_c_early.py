"""Ctrl-C in the first second of a `gateway` command, while its modules still load (before any command has
taken the signal), ends it quietly: no Python traceback of whichever module was loading."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

CONSOLE_SCRIPT = Path(sys.executable).parent / "gateway"
# A module `gateway.cli` imports early: once its import is done, the CLI's own imports are still loading.
LOADING = "gateway.admin_client"


def _interrupt_while_loading(command: list[str], tmp_path: Path) -> tuple[int, str]:
    """Run `command` with Python's import-time report on stderr; send SIGINT as soon as LOADING is imported."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1", "GATEWAY_CONFIG": str(tmp_path / "config.yaml")}
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    said: list[str] = []
    try:
        for line in proc.stderr:
            said.append(line)
            if line.split("|")[-1].strip() == LOADING:
                proc.send_signal(signal.SIGINT)
                break
        else:
            pytest.fail(f"{LOADING} was never imported: {''.join(said)[-2000:]}")
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # The import-time report's own lines left out: what remains is what the user would see.
    shown = [line for line in [*said, *err.splitlines(keepends=True)] if not line.startswith("import time:")]
    return proc.returncode, "".join(shown) + out


@pytest.mark.parametrize("how", ["console script", "python -m gateway"])
@pytest.mark.parametrize(("command", "code"), [(["ingest-runs"], 130), (["eval", "--docs", "d", "--questions", "q"], 130),
                                               (["serve"], 0)])
def test_ctrl_c_while_the_cli_loads_exits_quietly(tmp_path, how, command, code):
    """It printed `Traceback (most recent call last)` … `KeyboardInterrupt`, from a module being imported, and
    the process died of SIGINT. Now: no output, exit 130, as a Ctrl-C later in the command; `serve`, whose
    Ctrl-C stop is always exit 0 (README), exits 0."""
    if how == "console script" and not CONSOLE_SCRIPT.exists():
        pytest.skip("the gateway console script is not installed (make setup installs it)")
    start = [str(CONSOLE_SCRIPT)] if how == "console script" else [sys.executable, "-m", "gateway"]
    returncode, shown = _interrupt_while_loading([*start, *command], tmp_path)
    assert "Traceback" not in shown and "KeyboardInterrupt" not in shown, shown
    assert returncode == code, shown
