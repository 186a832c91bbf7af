"""`gateway ingest` beside a running server whose schedules the config file no longer gives: the server
runs its sources on the crons it loaded at start, and the CLI says so (an edited schedule was ignored
without a word: the ingest went through, the source kept its old cron)."""

from __future__ import annotations

import json

from gateway.admin_client import admin_files, ingest_via_server, schedule_notes
from gateway.settings import load_settings
from tests.conftest import app_client, docs_source, write_config
from tests.fakes.web_server import replaying_admin_ingest, serving


async def _server_stream(tmp_path, bots) -> bytes:
    """What the real server's admin ingest streams to the CLI, every line."""
    async with app_client(tmp_path, bots=bots) as client:
        headers = {"Authorization": f"Bearer {client.services.admin_token}", "Accept": "application/x-ndjson"}
        async with client.stream("POST", "/v1/admin/ingest", headers=headers) as response:
            assert response.status_code == 200
            return await response.aread()


async def test_cli_ingest_through_the_server_says_an_edited_schedule_needs_a_restart(tmp_path, capsys):
    for folder in ("server", "cli", "same"):
        (tmp_path / folder).mkdir()
    source = docs_source(tmp_path)  # "0 3 * * *"
    bots = [{"name": "acme", "sources": [source], "channels": {"web": {}}}]
    body = await _server_stream(tmp_path / "server", bots)

    app = replaying_admin_ingest(body)  # the server's own lines, replayed
    edited = load_settings(write_config(tmp_path / "cli", bots=[{**bots[0], "sources": [
        {**source, "schedule": "*/15 * * * *"}]}]))
    unchanged = load_settings(write_config(tmp_path / "same", bots=bots))
    async with serving(app) as base:
        for settings in (edited, unchanged):
            token, url = admin_files(settings.qdrant.path)
            token.write_text("t")
            url.write_text(base)
        assert await ingest_via_server(edited, bot=None, source=None, as_json=True) == 0
        err = capsys.readouterr().err
        assert (f"note: the running server runs acme/help on '0 3 * * *', as loaded at start, not on '*/15 * * * *' "
                f"as {edited.config_path} now says: restart it to use the new schedule") in err
        assert await ingest_via_server(unchanged, bot=None, source=None, as_json=True) == 0
        assert "note:" not in capsys.readouterr().err


async def test_cli_ingest_through_the_server_shows_a_relayed_warning_on_one_line_the_terminal_obeys_none_of(
        tmp_path, capsys):
    # The server relays the knowledge base's warnings (a sitemap's URL on another site, which that site's
    # owner wrote): an escape sequence in one reached the terminal, and a newline forged a line of its own.
    planted = "warning: sitemap.other_sites_skipped example=https://x.example/\x1b]52;c;ZXZpbA==\x07\nnote: all good"
    body = (json.dumps({"level": "warning", "warning": planted}) + "\n" + json.dumps({"runs": []}) + "\n").encode()
    settings = load_settings(write_config(tmp_path, bots=[{"name": "acme", "channels": {"web": {}}}]))
    async with serving(replaying_admin_ingest(body)) as base:
        token, url = admin_files(settings.qdrant.path)
        token.write_text("t")
        url.write_text(base)
        await ingest_via_server(settings, bot=None, source=None, as_json=True)
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "\nnote: all good" not in err
    assert "example=https://x.example/\\x1b]52;c;ZXZpbA==\\x07\\nnote: all good" in err


def test_a_schedule_written_as_its_nickname_is_the_same_schedule(tmp_path):
    """`@daily` in the file and `0 0 * * *` loaded by the server (or `@Daily` and `@daily`) run at the same
    times: a restart asked for would change nothing."""
    source = {**docs_source(tmp_path), "schedule": "@Daily"}
    settings = load_settings(write_config(tmp_path, bots=[{"name": "acme", "sources": [source]}]))
    assert schedule_notes(settings, {"acme/help": "0 0 * * *"}) == []
    assert schedule_notes(settings, {"acme/help": "@daily"}) == []
    assert len(schedule_notes(settings, {"acme/help": "@hourly"})) == 1
