"""`make run` with a config path, host or port holding a space (review finding 8), or an older Python."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time

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


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("ingest_exit, serves", [(0, True), (1, True), (2, False)])
def test_make_run_serves_when_a_source_failed_but_not_on_a_config_error(tmp_path, ingest_exit, serves):
    """`gateway ingest` exits 1 when a source failed (recorded; the server retries it on its schedule)
    and 2 on a config error, which `serve` would hit as well."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    calls = tmp_path / "calls"
    python = venv / "bin" / "python"  # stands in for the venv's python: records each command, exits as told
    python.write_text(f'#!/bin/sh\necho "$3" >> "{calls}"\n[ "$3" = ingest ] && exit {ingest_exit}\nexit 0\n')
    python.chmod(0o755)
    (venv / ".installed").touch()  # newer than the locks: make installs nothing
    proc = subprocess.run(["make", "run", f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert calls.read_text().split() == (["db", "ingest", "serve"] if serves else ["db", "ingest"])
    assert (proc.returncode == 0) == serves, proc.stderr
    assert ("starting the server anyway" in proc.stderr) == (ingest_exit == 1)
    # The echoed recipe held that note's words, so every `make run` showed "a source failed to ingest"; and
    # an exit 1 that no source caused (the index folder held by a `gateway chat`) was told as one.
    assert ("ended with errors" in proc.stdout + proc.stderr) == (ingest_exit == 1), proc.stdout
    assert "a source failed" not in proc.stdout + proc.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("old_venv", [False, True])
def test_make_says_python_3_11_is_needed_before_pip_does(tmp_path, old_venv):
    """Python 3.10 (Ubuntu 22.04's python3) failed in pip on a lock pin that needs 3.11, and the venv it
    made stayed: a rerun with PYTHON=python3.11 still used it."""
    calls = tmp_path / "calls"
    python = tmp_path / "python3.10"  # answers as Python 3.10 would, and records what it was asked
    python.write_text(f'#!/bin/sh\necho "$@" >> "{calls}"\n[ "$1" = -V ] && echo "Python 3.10.13"\n'
                      '[ "$1" = -c ] && exit 1\nexit 0\n')
    python.chmod(0o755)
    venv = tmp_path / "venv"
    if old_venv:
        (venv / "bin").mkdir(parents=True)
        shutil.copy(python, venv / "bin" / "python")
    proc = subprocess.run(["make", "install", f"VENV={venv}", f"PYTHON={python}"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode != 0
    expected = (f"make: {venv} was made with Python 3.10.13, and the gateway needs Python 3.11 or newer: remove it "
                f"(rm -rf {venv}) and run make again" if old_venv else
                f"make: {python} is Python 3.10.13, and the gateway needs Python 3.11 or newer: run make with "
                "PYTHON=python3.11")
    assert expected in proc.stderr, proc.stderr
    assert not any(" pip " in f" {line} " or "venv" in line.split() for line in calls.read_text().splitlines())


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_says_so_when_the_python_it_was_given_is_not_there(tmp_path):
    """A machine without `python3` (or a PYTHON=python3.12 not installed) was told "make: python3 is /bin/sh: 2:
    python3: not found, and the gateway needs Python 3.11 or newer": the shell's error read as a version."""
    missing = tmp_path / "python3.12"
    proc = subprocess.run(["make", "install", f"VENV={tmp_path / 'venv'}", f"PYTHON={missing}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and not (tmp_path / "venv").exists()
    assert f"make: {missing} was not found: install Python 3.11 or newer, or run make with PYTHON=python3.11 (or " \
           "another interpreter of 3.11 or newer on your PATH)" in proc.stderr, proc.stderr
    assert "/bin/sh" not in proc.stderr, proc.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_says_so_when_the_python_it_was_given_does_not_run(tmp_path):
    """A pyenv shim of a version not selected (`python3.9` on PATH, 3.9 installed but not active) exits 127
    with pyenv's lines, which were read as a version: "make: python3.9 is pyenv: python3.9: command not
    found <blank line> The `python3.9' command exists in these Python versions: …, and the gateway needs
    Python 3.11 or newer"."""
    shim = tmp_path / "python3.9"
    shim.write_text('#!/bin/sh\necho "pyenv: python3.9: command not found" >&2\necho >&2\n'
                    'echo "The \\`python3.9\' command exists in these Python versions:" >&2\nexit 127\n')
    shim.chmod(0o755)
    proc = subprocess.run(["make", "install", f"VENV={tmp_path / 'venv'}", f"PYTHON={shim}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and not (tmp_path / "venv").exists()
    assert f"make: {shim} did not run (exit 127: pyenv: python3.9: command not found): install Python 3.11 or " \
           "newer, or run make with PYTHON=python3.11 (or another interpreter of 3.11 or newer on your PATH)" \
           in proc.stderr, proc.stderr
    assert "is pyenv" not in proc.stderr and "needs Python 3.11 or newer: run make" not in proc.stderr, proc.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_ctrl_c_on_make_run_is_a_clean_stop(tmp_path):
    """Ctrl-C reaches make, its shell and the server at once. The shell around `serve` died of it, or
    passed on serve's 130, and make ended on "*** [Makefile:…: run] Interrupt" or "Error 130", as after a
    failure; the recipe's shell now gives way to `serve`, which exits 0 after a graceful stop
    (tests/test_shutdown.py)."""
    venv, ready = tmp_path / "venv", tmp_path / "serving"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"  # stands in for the venv's python: `serve` waits, and exits 0 on SIGINT
    serve = (f"import pathlib, signal, sys, time; signal.signal(signal.SIGINT, lambda *_: sys.exit(0)); "
             f"pathlib.Path({str(ready)!r}).touch(); time.sleep(60)")
    python.write_text(f'#!/bin/sh\n[ "$3" = serve ] && exec {sys.executable} -c "{serve}"\nexit 0\n')
    python.chmod(0o755)
    (venv / ".installed").touch()  # newer than the locks: make installs nothing
    make = subprocess.Popen(["make", "run", f"VENV={venv}"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)  # its own process group, as a terminal's job
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() and make.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), make.communicate()[1]
        os.killpg(make.pid, signal.SIGINT)  # what Ctrl-C does
        _, err = make.communicate(timeout=30)
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGKILL)
            make.wait()
    assert "make: ***" not in err, err


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_clean_leaves_no_sqlite_journal_behind(tmp_path):
    # `make clean` removed var/*.db but not its -wal and -shm files: the next `make run` created a new
    # database beside the old one's write-ahead log, which SQLite may replay into it.
    var = tmp_path / "var"
    (var / "qdrant").mkdir(parents=True)
    for name in (".gitkeep", "gateway.db", "gateway.db-wal", "gateway.db-shm", "qdrant.admin.token",
                 "qdrant.admin.url"):
        (var / name).write_text("x")
    proc = subprocess.run(["make", "-f", str(ROOT / "Makefile"), "clean", f"VENV={tmp_path / 'venv'}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in var.iterdir()) == [".gitkeep"]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_install_says_what_the_silent_pip_step_does_before_it(tmp_path):
    """A first `make run` sat for minutes on a `pip install --quiet` line, saying nothing of how long or
    how much, which reads as a hang."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"  # stands in for the venv's python: 3.11+, pip succeeds at once
    python.write_text("#!/bin/sh\nexit 0\n")
    python.chmod(0o755)
    proc = subprocess.run(["make", "install", f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    pip = next(i for i, line in enumerate(lines) if "pip install" in line)
    note = next(i for i, line in enumerate(lines) if line.startswith("make: installing"))
    assert note < pip and "minutes" in lines[note] and "GB" in lines[note], proc.stdout
    assert not any("echo" in line for line in lines), proc.stdout  # the note alone, not its recipe line
