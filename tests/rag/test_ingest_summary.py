"""`gateway ingest`'s line for a source says how many documents changed, beside its chunk counts: a one-line
edit read "1 updated, 1 deleted", as if two things had changed."""

from __future__ import annotations

from gateway.cli_output import print_reports
from gateway.settings import SourceSettings
from rag.ingest import Ingestor
from tests.rag.kb import write_kb


async def test_ingest_summary_counts_a_one_line_edit_as_one_document_changed(tmp_path, index, dense, sparse, sessions,
                                                                            capsys):
    folder = write_kb(tmp_path / "kb")
    ingestor = Ingestor(index, dense, sparse, sessions)
    source = SourceSettings(name="docs", type="directory", path=str(folder))
    first = await ingestor.ingest_source("acme", source)
    files = first.documents  # those read (not every file in the folder is a document)
    print_reports([first.as_dict()], as_json=False)
    assert capsys.readouterr().out.startswith(f"acme/docs: {files} new documents (chunks: {first.added} added, 0 updated, "
                                              "0 deleted, 0 unchanged) in ")

    billing = folder / "billing.md"
    billing.write_text(billing.read_text().replace("five business days", "ten business days"))
    edited = await ingestor.ingest_source("acme", source)
    # The edited chunk's text names it: its new version is written (updated), its old one deleted.
    print_reports([edited.as_dict()], as_json=False)
    assert capsys.readouterr().out.startswith(f"acme/docs: 1 document changed (chunks: 0 added, 1 updated, 1 deleted, "
                                              f"{first.added - 1} unchanged) in ")

    (folder / "account.txt").unlink()
    (folder / "new.md").write_text("# New\n\nA page written today about the brand new export feature.\n")
    removed = await ingestor.ingest_source("acme", source)
    print_reports([removed.as_dict()], as_json=False)
    assert capsys.readouterr().out.startswith("acme/docs: 1 new document, 1 removed (chunks: 1 added, 0 updated, "
                                              "1 deleted, ")
    again = await ingestor.ingest_source("acme", source)
    print_reports([again.as_dict()], as_json=False)
    assert capsys.readouterr().out.startswith("acme/docs: no document changed (chunks: 0 added, 0 updated, 0 deleted, ")
