"""A directory's files of types no loader takes: `gateway ingest` warns about documents left out (a .docx),
and `gateway eval`, which says so itself, says it once."""

from __future__ import annotations

import json

from gateway.cli import main


def test_eval_names_the_file_types_it_did_not_read_once(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no config.yaml here: eval runs on the built-in defaults
    monkeypatch.delenv("GATEWAY_CONFIG", raising=False)  # as `make test` exports it
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "billing.md").write_text("# Billing\n\nInvoices are sent monthly by email.\n")
    (docs / "manual.docx").write_bytes(b"PK\x03\x04 a Word file")
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question": "How are invoices sent?", "gold_texts": ["sent monthly"]}) + "\n")
    assert main(["eval", "--docs", str(docs), "--questions", str(questions), "--json"]) == 0
    err = capsys.readouterr().err
    assert err.count("not read") == 1 and "note: files of other types were not read: .docx (1)" in err
