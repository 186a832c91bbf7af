"""The admin ingest route refuses a job sent with another configuration than the server's (review
finding 7): the server would run it with what it loaded at start and silently ignore the caller's file."""

from __future__ import annotations

from gateway.settings import load_settings
from tests.conftest import app_client, docs_source, write_config


async def test_config_admin_ingest_refuses_another_configuration_and_serves_old_clients(tmp_path):
    source = docs_source(tmp_path)
    bots = [{"name": "acme", "sources": [source], "channels": {"web": {}}}]
    async with app_client(tmp_path, bots=bots) as client:
        svc = client.services
        headers = {"Authorization": f"Bearer {svc.admin_token}"}
        # The CLI reads the file again; a source added since changes the fingerprint.
        (tmp_path / "cli").mkdir()
        changed = load_settings(write_config(tmp_path / "cli", bots=[
            {**bots[0], "sources": [source, {**source, "name": "more"}]}]))
        refused = await client.post("/v1/admin/ingest", headers=headers,
                                    params={"config_fingerprint": changed.ingest_fingerprint()})
        assert refused.status_code == 409
        assert refused.json()["error"] == (
            f"the running server loaded {svc.settings.config_path} as it was at start; restart it to use the "
            "changed configuration, or stop it and run ingest again")

        same = await client.post("/v1/admin/ingest", headers=headers,
                                 params={"config_fingerprint": svc.settings.ingest_fingerprint()})
        assert same.status_code == 200 and [r["source"] for r in same.json()["runs"]] == ["help"]
        # An older CLI sends no fingerprint: the ingest runs as it always did.
        old = await client.post("/v1/admin/ingest", headers=headers)
        assert old.status_code == 200 and old.json()["runs"][0]["status"] == "ok"
