"""Ctrl-C during `gateway ingest` says what became of the run it cut short."""

import asyncio
import os
import signal

import pytest

from gateway.cli import main
from gateway.knowledge import Knowledge
from tests.conftest import write_config


def test_ctrl_c_during_an_ingest_says_the_run_is_recorded_and_to_ingest_again(tmp_path, monkeypatch, capsys):
    """It ended with exit 130 and not a word: the user could not tell whether the knowledge base was
    left half done, nor that `gateway ingest-runs` shows the run as failed, "cancelled before it finished"."""
    docs = tmp_path / "docs"
    docs.mkdir()
    config = write_config(tmp_path, bots=[{"name": "acme", "channels": {"web": {}}, "sources": [
        {"name": "docs", "type": "directory", "path": str(docs)}]}])
    assert main(["db", "upgrade", "--config", str(config)]) == 0

    async def interrupted(self, **kwargs):  # what Ctrl-C does to asyncio.run: its task is cancelled
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.sleep(30)

    monkeypatch.setattr(Knowledge, "open", lambda self: asyncio.sleep(0))
    monkeypatch.setattr(Knowledge, "ingest", interrupted)
    assert main(["ingest", "--config", str(config)]) == 130
    assert capsys.readouterr().err.splitlines()[-1] == (
        "interrupted: a run cut short is recorded as failed (`gateway ingest-runs` shows it); run `gateway ingest` "
        "again to finish it")


def test_ctrl_c_during_an_ingest_through_the_server_says_the_server_goes_on(tmp_path, monkeypatch, capsys):
    """Through a running server, Ctrl-C stops only the CLI, and it said nothing: the user could think the
    ingest was stopped while the server went on with it and recorded it."""
    from gateway import admin_client
    from gateway.settings import load_settings

    settings = load_settings(write_config(tmp_path))
    token, url = admin_client.admin_files(settings.qdrant.path)
    token.write_text("t")
    url.write_text("http://127.0.0.1:1")

    async def interrupted(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.sleep(30)

    monkeypatch.setattr(admin_client, "_ingest_on_server", interrupted)
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(admin_client.ingest_via_server(settings, bot=None, source=None, as_json=False))
    assert capsys.readouterr().err.splitlines()[-1] == (
        "interrupted: the server goes on with the ingest and records it; `gateway ingest-runs` shows how it ended")
