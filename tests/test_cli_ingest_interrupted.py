"""Ctrl-C during `gateway ingest` says what became of the run it cut short."""

import asyncio
import json
import os
import signal
import threading

import pytest

from gateway.cli import main
from gateway.knowledge import Knowledge
from tests.conftest import write_config


def _one_document(tmp_path):
    """(its folder, the config) of bot acme with one Markdown document to ingest, its database made."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "refunds.md").write_text("# Refunds\n\nRefunds are paid back within 14 days of the return.\n")
    config = write_config(tmp_path, bots=[{"name": "acme", "channels": {"web": {}}, "sources": [
        {"name": "docs", "type": "directory", "path": str(docs)}]}])
    assert main(["db", "upgrade", "--config", str(config)]) == 0
    return docs, config


def _terminated_once_written(monkeypatch) -> None:
    """The ingest gets SIGTERM once a batch's points are in the index, not yet in the store."""
    from rag import ingest as rag_ingest

    write_points = rag_ingest.write_points

    async def terminated_once_written(*args, **kwargs):
        await write_points(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.sleep(30)

    monkeypatch.setattr(rag_ingest, "write_points", terminated_once_written)


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


@pytest.mark.parametrize("sent", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_an_ingest_through_the_server_says_the_server_goes_on(tmp_path, monkeypatch, capsys, sent):
    """Through a running server, Ctrl-C (or SIGTERM) stops only the CLI, and it said nothing: the user could
    think the ingest was stopped while the server went on with it and recorded it."""
    from gateway import admin_client
    from gateway.cli_output import Terminated
    from gateway.settings import load_settings

    settings = load_settings(write_config(tmp_path))
    token, url = admin_client.admin_files(settings.qdrant.path)
    token.write_text("t")
    url.write_text("http://127.0.0.1:1")

    async def signalled(*args, **kwargs):
        os.kill(os.getpid(), sent)
        await asyncio.sleep(30)

    monkeypatch.setattr(admin_client, "_ingest_on_server", signalled)
    with pytest.raises(KeyboardInterrupt if sent == signal.SIGINT else Terminated):  # exit 130 or 143 in main()
        asyncio.run(admin_client.ingest_via_server(settings, bot=None, source=None, as_json=False))
    assert capsys.readouterr().err.splitlines()[-1] == (
        "interrupted: the server goes on with the ingest and records it; `gateway ingest-runs` shows how it ended")


def test_sigterm_during_an_ingest_records_the_run_cancelled_and_exits_143(tmp_path, monkeypatch, capsys):
    """SIGTERM (`timeout`, a cron supervisor) killed the process on the spot: its run stayed `running` in
    `gateway ingest-runs` and /readyz until another gateway process marked it interrupted."""
    _, config = _one_document(tmp_path)
    _terminated_once_written(monkeypatch)
    assert main(["ingest", "--config", str(config)]) == 143
    assert capsys.readouterr().err.splitlines()[-1] == (
        "interrupted: a run cut short is recorded as failed (`gateway ingest-runs` shows it); run `gateway ingest` "
        "again to finish it")
    assert main(["ingest-runs", "--config", str(config), "--json"]) == 0
    [run] = json.loads(capsys.readouterr().out)["runs"]
    assert (run["status"], run["errors"]) == ("failed", ["cancelled before it finished"])


def test_an_ingest_cut_short_once_its_points_are_written_leaves_none_of_them_in_the_index(tmp_path, monkeypatch):
    """Cut short between writing a document's points and recording them (Ctrl-C, SIGTERM, a server's stop), the
    run left them in the index unrecorded, where searches found them until the next run of the source."""
    from qdrant_client import QdrantClient

    _, config = _one_document(tmp_path)
    _terminated_once_written(monkeypatch)
    assert main(["ingest", "--config", str(config)]) == 143
    client = QdrantClient(path=str(tmp_path / "qdrant"))
    try:
        assert sum(client.count(c.name).count for c in client.get_collections().collections) == 0
    finally:
        client.close()


def test_an_ingest_run_outside_the_main_thread_still_runs(tmp_path, monkeypatch):
    """Signal handlers are for the main thread only: an ingest in a thread of its own (the web tests' `make run`)
    must not fail for want of its SIGTERM handler."""
    config = write_config(tmp_path, bots=[{"name": "acme", "channels": {"web": {}}, "sources": [
        {"name": "docs", "type": "directory", "path": str(tmp_path)}]}])
    assert main(["db", "upgrade", "--config", str(config)]) == 0
    monkeypatch.setattr(Knowledge, "open", lambda self: asyncio.sleep(0))
    monkeypatch.setattr(Knowledge, "ingest", lambda self, **kwargs: asyncio.sleep(0, []))
    codes: list[int] = []
    worker = threading.Thread(target=lambda: codes.append(main(["ingest", "--config", str(config)])))
    worker.start()
    worker.join(60)
    assert codes == [0]


def test_an_ingest_cut_short_as_it_records_a_changed_document_leaves_its_new_version_in_the_index(tmp_path,
                                                                                                monkeypatch):
    """Cut short once its old points were deleted, before its row was recorded, the run also deleted the new
    version's: the document was answered in neither version until the next run of its source."""
    from qdrant_client import QdrantClient

    from rag.document_rows import DocumentRows

    docs, config = _one_document(tmp_path)
    assert main(["ingest", "--config", str(config)]) == 0
    (docs / "refunds.md").write_text("# Refunds\n\nRefunds are paid back within 30 days of the return.\n")

    async def terminated_as_it_records(self, writes):
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.sleep(30)

    monkeypatch.setattr(DocumentRows, "_write", terminated_as_it_records)
    assert main(["ingest", "--config", str(config)]) == 143
    client = QdrantClient(path=str(tmp_path / "qdrant"))
    try:
        texts = [str(p.payload) for c in client.get_collections().collections
                 for p in client.scroll(c.name, limit=100)[0]]
    finally:
        client.close()
    assert len(texts) == 1 and "30 days" in texts[0]


def test_an_ingest_cut_short_whose_clean_up_fails_still_ends_as_cut_short(tmp_path, monkeypatch, capsys):
    """The deletion of a cut-short batch's points failing (the store gone as the server stops) replaced the
    cancellation with its own error: the run was not recorded as cancelled and the CLI did not say so."""
    from rag import index_check

    _, config = _one_document(tmp_path)

    async def store_gone(*args, **kwargs):
        raise ConnectionError("the store went away")

    _terminated_once_written(monkeypatch)
    monkeypatch.setattr(index_check, "delete_unrecorded", store_gone)
    assert main(["ingest", "--config", str(config)]) == 143
    assert capsys.readouterr().err.splitlines()[-1].startswith("interrupted: a run cut short is recorded as failed")


def test_an_ingest_in_process_gives_back_the_sigterm_handler_it_found(tmp_path, monkeypatch):
    """`ingest` left SIGTERM at its default once it ended: a program (or a test run) that calls `main` had its
    own handler replaced, and its next SIGTERM killed it on the spot instead of stopping it its way."""
    config = write_config(tmp_path, bots=[{"name": "acme", "channels": {"web": {}}, "sources": [
        {"name": "docs", "type": "directory", "path": str(tmp_path)}]}])
    assert main(["db", "upgrade", "--config", str(config)]) == 0
    monkeypatch.setattr(Knowledge, "open", lambda self: asyncio.sleep(0))
    monkeypatch.setattr(Knowledge, "ingest", lambda self, **kwargs: asyncio.sleep(0, []))

    def embedders_own(signum, frame):
        raise AssertionError("not sent")

    previous = signal.signal(signal.SIGTERM, embedders_own)
    try:
        assert main(["ingest", "--config", str(config)]) == 0
        assert signal.getsignal(signal.SIGTERM) is embedders_own
    finally:
        signal.signal(signal.SIGTERM, previous)
