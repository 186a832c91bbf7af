"""`gateway ingest` beside a running server that loaded another configuration: the server refuses the job,
and the CLI says what differs and what to do (it named only the server's file: the user had to find what
in it had changed since the server started)."""

from __future__ import annotations

import pytest

from gateway.admin_client import admin_files, ingest_via_server
from gateway.settings import load_settings
from tests.conftest import app_client, docs_source, write_config
from tests.fakes.web_server import replaying_admin_ingest, serving
from tests.test_cli import _run
from tests.test_cli_errors import _bot, _docs
from tests.test_cli_errors import serving as serving_config


async def _refused(settings, status: int, body: bytes) -> int:
    """`ingest_via_server` of `settings` against a server that answers `status` and `body`."""
    async with serving(replaying_admin_ingest(body, status=status)) as base:
        token, url = admin_files(settings.qdrant.path)
        token.write_text("t")
        url.write_text(base)
        return await ingest_via_server(settings, bot=None, source=None, as_json=True)


async def test_cli_ingest_refused_by_a_server_of_another_configuration_says_what_differs(tmp_path, capsys):
    source = docs_source(tmp_path)
    bots = [{"name": "acme", "sources": [source], "channels": {"web": {}}}]
    moved = str(tmp_path / "moved")
    async with app_client(tmp_path, bots=bots) as client:
        # The user edits the file the server loaded, and ingests.
        edited = load_settings(write_config(tmp_path, embedding={"max_chunk_tokens": 128}, bots=[
            {**bots[0], "sources": [{**source, "path": moved}, {**source, "name": "faq", "schedule": "@daily"}]}]))
        assert edited.config_path == client.services.settings.config_path
        refusal = await client.post("/v1/admin/ingest", headers={"Authorization": f"Bearer {client.services.admin_token}"},
                                    params={"config_fingerprint": edited.ingest_fingerprint()})
        assert refusal.status_code == 409

    assert await _refused(edited, refusal.status_code, refusal.content) == 1
    path = edited.config_path
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: the running server ingests with {path} as it was when it started, and the file has changed since "
        "in what an ingest uses: embedding.max_chunk_tokens: 256 in the server, 128 in the file; "
        f"bots[acme].sources[help].path: {source['path']!r} in the server, {moved!r} in the file; "
        f"bots[acme].sources[faq]: only in the file. Restart the server (`gateway serve`, or `make run`, "
        f"which ingests first) to ingest with {path}, or stop it and run `gateway ingest` again")

    (tmp_path / "other").mkdir()  # another file than the server's: both are named
    other = load_settings(write_config(tmp_path / "other", bots=[{**bots[0], "sources": []}]))
    assert await _refused(other, refusal.status_code, refusal.content) == 1
    # "Restart the server (`gateway serve`)" restarted it on its own file again (`make run` too): it names ours.
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: the running server ingests with {path} as it was when it started, and {other.config_path} differs "
        "from it in what an ingest uses: bots[acme].sources[help]: only in the server. Restart the server on "
        f"that file (`gateway serve --config {other.config_path}`) to ingest with {other.config_path}, or stop it "
        "and run `gateway ingest` again")


async def test_cli_ingest_refused_by_a_server_that_says_only_why_shows_its_message(tmp_path, capsys):
    """An older server sends no configuration of its own: its message is all there is to show."""
    settings = load_settings(write_config(tmp_path))
    assert await _refused(settings, 409, b'{"error": "the running server loaded x"}') == 1
    assert capsys.readouterr().err.splitlines()[-1] == "error: the running server loaded x"


def test_ingest_with_a_changed_config_while_a_server_holds_the_index_is_refused(tmp_path):
    """The server ingests with the configuration it loaded: a source added to the file since would be
    silently left out, so the CLI's configuration must match the server's."""
    docs = _docs(tmp_path)
    config = write_config(tmp_path, bots=[_bot("acme", "docs", docs=docs)])
    assert _run("db", "upgrade", "--config", str(config)).returncode == 0
    with serving_config(config):  # the real server, on a port, as `gateway serve` runs it
        write_config(tmp_path, bots=[_bot("acme", "docs", "more", docs=docs)])
        changed = _run("ingest", "--config", str(config), "--json")
    assert "held by the running server" in changed.stderr
    assert changed.returncode == 1 and changed.stdout == ""
    assert changed.stderr.strip().splitlines()[-1] == (
        f"error: the running server ingests with {config} as it was when it started, and the file has changed since "
        "in what an ingest uses: bots[acme].sources[more]: only in the file. Restart the server (`gateway serve`, or `make run`, "
        f"which ingests first) to ingest with {config}, or stop it and run `gateway ingest` again")


async def test_cli_ingest_refused_over_a_rotated_source_token_shows_neither_token(tmp_path, capsys):
    """The server's configuration holds its sources' URLs as it read them, credentials and all (a wiki's
    `?access_token=`, a `user:password@`): a token rotated in the file was printed as the server's old one,
    which only the CLI's own file's secrets were redacted from."""
    import json

    def wiki(token: str, password: str) -> dict:
        return {"name": "wiki", "type": "urls", "urls": [
            f"https://wiki.example.com/export?format=html&access_token={token}",
            f"https://reader:{password}@intranet.example.com/faq"]}

    server = load_settings(write_config(tmp_path, bots=[{"name": "acme", "sources": [wiki("oldtoken1234", "oldpass1234")]}]))
    (tmp_path / "file").mkdir()
    ours = load_settings(write_config(tmp_path / "file", bots=[{"name": "acme", "sources": [wiki("newtoken5678", "newpass5678")]}]))
    body = json.dumps({"error": "another configuration", "loaded": server.ingest_config(),
                       "config_path": server.config_path}).encode()

    assert await _refused(ours, 409, body) == 1
    said = capsys.readouterr().err.splitlines()[-1]
    assert "bots[acme].sources[wiki].urls:" in said  # what differs is still named
    for secret in ("oldtoken1234", "oldpass1234", "newtoken5678", "newpass5678"):
        assert secret not in said, said


async def test_a_refusal_carries_no_credential_of_the_servers_source_urls(tmp_path, capsys):
    """The 409's `loaded` held the server's source URLs as it read them, `?access_token=` and `user:password@`
    and all, for the admin token's holder: only the CLI masked them, in what it printed."""
    wiki = {"name": "wiki", "type": "urls", "schedule": "0 3 * * *", "urls": [
        "https://wiki.example.com/export?format=html&access_token=${WIKI_TOKEN}",
        "https://reader:${WIKI_PASSWORD}@intranet.example.com/faq",
        "https://${WIKI_KEY}@files.example.com/faq.md?page=2"]}
    env = {"WIKI_TOKEN": "Tok+en/Secret1", "WIKI_PASSWORD": "pass%40word2", "WIKI_KEY": "sk_live_key3"}
    bots = [{"name": "acme", "sources": [wiki], "channels": {"web": {}}}]
    async with app_client(tmp_path, bots=bots, env=env) as client:
        with pytest.MonkeyPatch.context() as patch:  # the user adds a source to the file the server loaded
            for key, value in env.items():
                patch.setenv(key, value)
            edited = load_settings(write_config(tmp_path, bots=[{**bots[0], "sources": [wiki, docs_source(tmp_path)]}]))
        refusal = await client.post("/v1/admin/ingest", headers={"Authorization": f"Bearer {client.services.admin_token}"},
                                    params={"config_fingerprint": edited.ingest_fingerprint()})
    assert refusal.status_code == 409
    body = refusal.text
    for secret in ["Tok+en/Secret1", "Tok en/Secret1", "Tok%2Ben", "Secret1", "pass%40word2", "pass@word2", "sk_live_key3"]:
        assert secret not in body, (secret, body)
    assert "https://wiki.example.com/export?format=html&access_token=[REDACTED]" in body  # the rest as it was
    assert "files.example.com/faq.md?page=2" in body

    # The CLI says what it said before: the source added, and no URL of the masked ones as differing.
    assert await _refused(edited, refusal.status_code, refusal.content) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: the running server ingests with {edited.config_path} as it was when it started, and the file has "
        "changed since in what an ingest uses: bots[acme].sources[help]: only in the file. Restart the server "
        f"(`gateway serve`, or `make run`, which ingests first) to ingest with {edited.config_path}, or stop it and run `gateway ingest` again")
