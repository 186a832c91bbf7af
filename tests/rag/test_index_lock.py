"""`folder_in_use`, which `gateway chat` and `gateway ingest` ask before loading anything, so that they go
through the running server: a process holding the folder is told, and a crashed one's leftover `.lock` file
is not taken for a running server (which would send the user to a server that is not there)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.settings import QdrantSettings
from rag.index_lock import folder_in_use
from tests.fakes.web_server import closed_port

HOLD = "import sys; from gateway.settings import QdrantSettings; from rag.index import open_index; " \
       "index = open_index(QdrantSettings(path=sys.argv[1], engine=sys.argv[2])); print('held', flush=True); " \
       "sys.stdin.read()"


@pytest.mark.parametrize("engine", ["local", "edge"])
def test_a_held_folder_is_in_use_and_a_crashed_holders_lock_file_is_not(tmp_path, engine):
    settings = QdrantSettings(path=str(tmp_path / "qdrant"), engine=engine)
    assert not folder_in_use(settings)  # no folder yet
    holder = subprocess.Popen([sys.executable, "-c", HOLD, settings.path, engine], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2],
                              env={**os.environ, "HF_HUB_OFFLINE": "1"})
    try:
        assert holder.stdout.readline().strip() == "held"
        assert folder_in_use(settings)
        holder.send_signal(signal.SIGKILL)  # a crash: no close, no unlock, the file left behind
        holder.wait(timeout=10)
    finally:
        holder.kill()
    lock = Path(settings.path) / ("edge" if engine == "edge" else "") / ".lock"
    assert lock.exists()
    assert not folder_in_use(settings)
    assert not folder_in_use(QdrantSettings(url=f"http://127.0.0.1:{closed_port()}", path=settings.path))
