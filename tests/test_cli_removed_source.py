"""`gateway ingest --json` for a source taken out of the config: its entry says how many documents went."""

from __future__ import annotations

import json

from tests.conftest import write_config
from tests.test_cli import PLANS, SYNC, _run


def test_cli_ingest_json_counts_the_documents_of_a_source_taken_out_of_the_config(tmp_path):
    """Its chunks were deleted, and its entry said `documents_removed: 0`."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "plans.md").write_text(PLANS)
    (docs / "sync.md").write_text(SYNC)
    bot = {"name": "acme", "channels": {"web": {}},
           "sources": [{"name": "docs", "type": "directory", "path": str(docs)}]}
    config = write_config(tmp_path, bots=[bot])
    assert _run("db", "upgrade", "--config", str(config)).returncode == 0
    first = json.loads(_run("ingest", "--config", str(config), "--json").stdout)
    assert first["runs"][0]["documents_new"] == 2
    write_config(tmp_path, bots=[{**bot, "sources": []}])
    removed = _run("ingest", "--config", str(config), "--json")
    assert removed.returncode == 0, removed.stderr
    [run] = json.loads(removed.stdout)["runs"]
    assert (run["source"], run["status"], run["deleted"]) == ("docs", "removed", first["added"])
    assert (run["documents_removed"], run["documents_new"], run["documents_changed"]) == (2, 0, 0)
