"""A directory source's symlinks out of its folder are not read unless the source says so.

Why: they were followed wherever they led, so anyone who could write to the docs folder could make the bot
serve any file the server could read (a link to /etc/passwd, or to the gateway's env file, as `faq.md`)."""

from __future__ import annotations

import pytest

from gateway.errors import ConfigError
from gateway.settings import load_settings
from rag.sources import load_directory
from tests.conftest import write_config
from tests.rag.ingest_helpers import open_knowledge

REFUSED = ("not read: a symlink to {} outside the source's folder (anyone who can write to the folder could "
           "make the bot serve any file of this server); set `follow_symlinks_outside: true` on the source to read it")


def _tree(tmp_path):
    """docs/ with a page, links inside it (a page and a folder), and links out of it (a page and a folder)."""
    server = tmp_path / "server"
    (server / "etc").mkdir(parents=True)
    (server / "secret.env").write_text("DATABASE_PASSWORD=hunter2\n")
    (server / "etc" / "passwd.md").write_text("root:x:0:0:root:/root:/bin/bash\n")
    docs = tmp_path / "docs"
    (docs / "guides").mkdir(parents=True)
    (docs / "guides" / "setup.md").write_text("# Setup\n\nInstall it.\n")
    (docs / "faq.md").write_text("# FAQ\n\nAnswers.\n")
    (docs / "same-faq.md").symlink_to(docs / "faq.md")
    (docs / "steps").symlink_to(docs / "guides", target_is_directory=True)
    (docs / "env.txt").symlink_to(server / "secret.env")
    (docs / "system").symlink_to(server / "etc", target_is_directory=True)
    (server / "etc" / "back").symlink_to(docs, target_is_directory=True)  # a loop, were it followed
    return docs


async def test_links_out_of_the_folder_are_errors_and_links_inside_it_still_work(tmp_path):
    result = await load_directory(_tree(tmp_path))
    assert sorted(d.doc_id for d in result.documents) == ["faq.md", "guides/setup.md", "same-faq.md"]
    assert result.refused == [("system", REFUSED.format("a folder")), ("env.txt", REFUSED.format("a file"))]
    assert not any("hunter2" in d.text or "root:x" in d.text for d in result.documents)


async def test_the_source_may_allow_links_out_of_its_folder_and_a_loop_does_not_hang(tmp_path):
    result = await load_directory(_tree(tmp_path), follow_symlinks_outside=True)
    assert sorted(d.doc_id for d in result.documents) == ["env.txt", "faq.md", "guides/setup.md", "same-faq.md",
                                                          "system/passwd.md"]
    assert result.refused == [] and result.errors == []


async def test_a_page_replaced_by_a_link_out_of_the_folder_leaves_the_index(tmp_path):
    """An error keeps a page's chunks until it is fixed; this one's would go on serving the server's file."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "faq.md").write_text("# FAQ\n\nAnswers.\n")
    (docs / "env.txt").write_text("Plans and prices.\n")
    bot = {"name": "acme", "channels": {"web": {}},
           "sources": [{"name": "help", "type": "directory", "path": str(docs), "schedule": "0 4 * * 1"}]}
    async with open_knowledge(tmp_path, bot) as (_, _, knowledge):
        assert (await knowledge.ingest_source("acme", "help")).documents == 2
        (docs / "env.txt").unlink()
        (tmp_path / "secret.env").write_text("DATABASE_PASSWORD=hunter2\n")
        (docs / "env.txt").symlink_to(tmp_path / "secret.env")
        report = await knowledge.ingest_source("acme", "help")
        assert report.errors == [f"env.txt: {REFUSED.format('a file')}"] and report.deleted >= 1
        assert report.total == await knowledge.index.count("acme") and report.status == "partial"


def test_only_a_directory_source_takes_follow_symlinks_outside(tmp_path):
    source = {"name": "s", "type": "urls", "urls": ["https://a.test/x"], "follow_symlinks_outside": True}
    with pytest.raises(ConfigError) as caught:
        load_settings(write_config(tmp_path, bots=[{"name": "acme", "sources": [source]}]))
    assert "`follow_symlinks_outside` is not read by a urls source" in str(caught.value)


async def test_a_symlink_loop_is_said_to_be_one_not_a_missing_target(tmp_path):
    (tmp_path / "faq.md").write_text("# FAQ\n\nAnswers.\n")
    (tmp_path / "self.md").symlink_to("self.md")
    (tmp_path / "a.md").symlink_to("b.md")
    (tmp_path / "b.md").symlink_to("a.md")
    result = await load_directory(tmp_path)
    assert [d.doc_id for d in result.documents] == ["faq.md"]
    assert dict(result.errors) == {
        "a.md": "symlink loop: it leads back to itself (through b.md); point it at the page",
        "b.md": "symlink loop: it leads back to itself (through a.md); point it at the page",
        "self.md": "symlink loop: it leads back to itself (through self.md); point it at the page",
    }
