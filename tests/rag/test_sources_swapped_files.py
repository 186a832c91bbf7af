"""A page of a directory source swapped for a symlink out of the folder after it was checked is not read.

Why: each file was checked (a symlink out of the folder is refused) and then read again by its path, so
whoever can write to the folder could swap the page for a link to the server's env file in between and the
bot served it. The swaps below happen at the two points in between: after the source's check, and just
before the file is opened."""

from __future__ import annotations

import os

import rag.sources
from rag.sources import load_directory

REFUSED = ("not read: a symlink to a file outside the source's folder (anyone who can write to the folder could "
           "make the bot serve any file of this server); set `follow_symlinks_outside: true` on the source to read it")


def _tree(tmp_path):
    """docs/ with faq.md and guides/setup.md; server/ outside it with secrets named like them."""
    server = tmp_path / "server"
    server.mkdir()
    (server / "secret.env").write_text("DATABASE_PASSWORD=hunter2\n")
    (server / "setup.md").write_text("# Setup\n\nDATABASE_PASSWORD=hunter2\n")
    docs = tmp_path / "docs"
    (docs / "guides").mkdir(parents=True)
    (docs / "faq.md").write_text("# FAQ\n\nAnswers.\n")
    (docs / "guides" / "setup.md").write_text("# Setup\n\nInstall it.\n")
    return docs, server


def _read(result) -> str:
    return " ".join(d.text for d in result.documents)


async def test_a_page_swapped_for_a_link_out_after_its_check_is_refused_not_read(tmp_path, monkeypatch):
    docs, server = _tree(tmp_path)
    read_file = rag.sources._read_file

    def swapped_then_read(file, *args, **kwargs):  # the test's seam: between the check and the read
        if file.name == "faq.md":
            file.unlink()
            file.symlink_to(server / "secret.env")
        return read_file(file, *args, **kwargs)

    monkeypatch.setattr(rag.sources, "_read_file", swapped_then_read)
    result = await load_directory(docs)
    assert "hunter2" not in _read(result)
    assert [d.doc_id for d in result.documents] == ["guides/setup.md"]
    assert result.refused == [("faq.md", REFUSED)]


async def test_a_page_or_its_folder_swapped_for_a_link_just_before_it_is_opened_is_refused(tmp_path, monkeypatch):
    docs, server = _tree(tmp_path)
    real_open = os.open
    docs = docs.resolve()
    swaps = {str(docs / "faq.md"): lambda: ((docs / "faq.md").unlink(), (docs / "faq.md").symlink_to(server / "secret.env")),
             str(docs / "guides" / "setup.md"): lambda: ((docs / "guides").rename(tmp_path / "old"),
                                                         (docs / "guides").symlink_to(server, target_is_directory=True))}

    def swapping_open(path, *args, **kwargs):  # the test's seam: the last moment before the open
        if (swap := swaps.pop(os.fspath(path), None)) is not None:
            swap()
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", swapping_open)
    result = await load_directory(docs)
    assert "hunter2" not in _read(result)
    assert result.documents == []
    assert sorted(result.refused) == [("faq.md", REFUSED), ("guides/setup.md", REFUSED)]
    assert swaps == {}


async def test_a_link_out_of_the_folder_to_a_device_is_refused_too_not_passed_over(tmp_path):
    docs, _ = _tree(tmp_path)
    (docs / "null.md").symlink_to(os.devnull)
    result = await load_directory(docs)
    assert ("null.md", REFUSED) in result.refused
    assert sorted(d.doc_id for d in result.documents) == ["faq.md", "guides/setup.md"]
