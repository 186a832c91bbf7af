"""`gateway ingest`'s lines agree in number with their counts: "its 1 chunks were deleted" read as a slip."""

from __future__ import annotations

from gateway.cli_output import print_reports

RUN = {"bot": "acme", "added": 0, "updated": 0, "deleted": 0, "unchanged": 0, "duration_s": 0.1, "errors": []}


def test_a_removed_source_of_one_chunk_says_it_in_the_singular(capsys):
    """Also the line of a server of an older version, which sends no `documents_removed`."""
    removed = [{**RUN, "source": "warehouse", "status": "removed", "deleted": n} for n in (1, 2)]
    print_reports(removed, as_json=False)
    assert capsys.readouterr().out == ("acme/warehouse: no longer in the config; its 1 chunk was deleted\n"
                                       "acme/warehouse: no longer in the config; its 2 chunks were deleted\n")


def test_a_removed_source_says_its_documents_beside_its_chunks_each_in_the_singular_or_plural(capsys):
    """The line gave the chunk count alone, which says little of how much of the knowledge base went."""
    removed = [{**RUN, "source": "warehouse", "status": "removed", "deleted": chunks, "documents_removed": documents}
               for documents, chunks in ((1, 1), (1, 3), (2, 5))]
    print_reports(removed, as_json=False)
    assert capsys.readouterr().out == ("acme/warehouse: no longer in the config; its 1 document (1 chunk) was deleted\n"
                                       "acme/warehouse: no longer in the config; its 1 document (3 chunks) was deleted\n"
                                       "acme/warehouse: no longer in the config; its 2 documents (5 chunks) were deleted\n")


def test_a_failed_source_of_one_chunk_says_it_keeps_it_in_the_singular(capsys):
    failed = {**RUN, "source": "docs", "status": "failed", "errors": ["the folder is gone"], "total": 1}
    print_reports([failed], as_json=False)
    assert capsys.readouterr().out == (
        "acme/docs: 0 added, 0 updated, 0 deleted, 0 unchanged chunks in 0.1s, 1 error(s); failed, its 1 chunk "
        "kept as it was\n")
