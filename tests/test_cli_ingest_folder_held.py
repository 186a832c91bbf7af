"""`gateway ingest` (or `gateway chat`) while another process that is no server holds the index folder: a second
`gateway ingest` started beside the first, the commonest case, was told only that "another process" held it and
that no server was found, with the admin token's path, and not which process that may be."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gateway.settings import load_settings
from tests.conftest import ROOT, upgrade, write_config
from tests.rag.test_index_lock import HOLD


@pytest.mark.parametrize("command", ["ingest", "chat"])
def test_a_folder_held_by_no_server_names_what_may_hold_it(tmp_path, command):
    config = write_config(tmp_path)
    settings = load_settings(config)
    upgrade(settings.database_url)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, settings.qdrant.path, "local"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    try:
        assert holder.stdout.readline().strip() == "held"
        proc = subprocess.run([sys.executable, "-m", "gateway", command, "--config", str(config)], cwd=ROOT, env=env,
                              input="How much is Plus?\n", capture_output=True, text=True, timeout=120)
    finally:
        holder.kill()
        holder.wait(timeout=10)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and last.startswith(f"error: {settings.qdrant.path} is in use by another process"), last
    assert last.endswith("is missing), so it is most likely another `gateway ingest` or `gateway chat` on this "
                         "config. Wait for it to end (or stop it) and run this again."), last
