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


def test_eval_reads_a_folder_of_links_to_documents_elsewhere(tmp_path, capsys, monkeypatch):
    """`--docs` is the caller's own folder: a folder of symlinks to the documents was refused (a directory
    source's safe default) with advice to set a source key eval does not have, and nothing was ingested."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GATEWAY_CONFIG", raising=False)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "billing.md").write_text("# Billing\n\nInvoices are sent monthly by email.\n")
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "billing.md").symlink_to(tmp_path / "docs" / "billing.md")
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question": "How are invoices sent?", "gold_texts": ["sent monthly"]}) + "\n")
    assert main(["eval", "--docs", str(tmp_path / "linked"), "--questions", str(questions), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["recall@1"] == 1.0
