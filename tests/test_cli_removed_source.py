"""`gateway ingest` for a source taken out of the config: its chunks are deleted, and its entry says how many
documents went."""

from __future__ import annotations

import json

from tests.conftest import write_config
from tests.test_cli import PLANS, SYNC, _run


def _docs_config(tmp_path):
    """A config whose bot `acme` has one source, `docs`, of two documents; the database upgraded."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "plans.md").write_text(PLANS)
    (docs / "sync.md").write_text(SYNC)
    bot = {"name": "acme", "channels": {"web": {}},
           "sources": [{"name": "docs", "type": "directory", "path": str(docs)}]}
    config = write_config(tmp_path, bots=[bot])
    assert _run("db", "upgrade", "--config", str(config)).returncode == 0
    return config, docs, bot


def test_cli_ingest_json_counts_the_documents_of_a_source_taken_out_of_the_config(tmp_path):
    """Its chunks were deleted, and its entry said `documents_removed: 0`."""
    config, _, bot = _docs_config(tmp_path)
    first = json.loads(_run("ingest", "--config", str(config), "--json").stdout)
    assert first["runs"][0]["documents_new"] == 2
    write_config(tmp_path, bots=[{**bot, "sources": []}])
    removed = _run("ingest", "--config", str(config), "--json")
    assert removed.returncode == 0, removed.stderr
    [run] = json.loads(removed.stdout)["runs"]
    assert (run["source"], run["status"], run["deleted"]) == ("docs", "removed", first["added"])
    assert (run["documents_removed"], run["documents_new"], run["documents_changed"]) == (2, 0, 0)


def test_cli_ingest_deletes_the_chunks_of_a_source_taken_out_of_the_config(tmp_path):
    """A renamed source answered twice over until the daily retention job; a bot the config does not
    name is left alone."""
    config, docs, _ = _docs_config(tmp_path)
    first = json.loads(_run("ingest", "--config", str(config), "--json").stdout)
    bot = {"name": "acme", "sources": [{"name": "manual", "type": "directory", "path": str(docs)}],
           "channels": {"web": {}}}
    write_config(tmp_path, bots=[bot])  # "docs" renamed "manual"
    renamed = _run("ingest", "--config", str(config))
    assert renamed.returncode == 0, renamed.stderr
    # Its documents too, as `--json`'s `documents_removed` counts them: the chunks alone did not say how much went.
    assert f"acme/docs: no longer in the config; its 2 documents ({first['added']} chunks) were deleted" in \
        renamed.stdout
    again = json.loads(_run("ingest", "--config", str(config), "--json").stdout)
    assert [(r["source"], r["status"]) for r in again["runs"]] == [("manual", "ok")]
    assert again["unchanged"] == first["added"] and again["deleted"] == 0
