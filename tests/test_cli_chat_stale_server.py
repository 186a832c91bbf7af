"""`gateway chat` while another process holds the index folder and a server that is gone left its URL
behind (killed, or the machine lost): chat said it was chatting through "the running server" and failed
only on the first question, the user sent to a server that is not there."""

from __future__ import annotations

import os
import subprocess
import sys

from gateway.admin_client import admin_files
from gateway.settings import load_settings
from tests.conftest import ROOT, upgrade, write_config
from tests.fakes.web_server import closed_port
from tests.rag.test_index_lock import HOLD


def test_chat_says_no_server_answers_where_a_gone_one_recorded_it_listens(tmp_path):
    config = write_config(tmp_path)
    settings = load_settings(config)
    upgrade(settings.database_url)
    token, url = admin_files(settings.qdrant.path)
    token.write_text("t")
    gone = f"http://127.0.0.1:{closed_port()}"
    url.write_text(gone)  # nothing listens there any more
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, settings.qdrant.path, "local"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    try:
        assert holder.stdout.readline().strip() == "held"
        proc = subprocess.run([sys.executable, "-m", "gateway", "chat", "--config", str(config)], cwd=ROOT, env=env,
                              input="How much is Plus?\n", capture_output=True, text=True, timeout=120)
    finally:
        holder.kill()
        holder.wait(timeout=10)
    assert proc.returncode == 1 and "held by the running server" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(
        f"error: {settings.qdrant.path} is in use by another process, and no gateway server answers at "
        f"{gone}, where one last recorded it listens (")
