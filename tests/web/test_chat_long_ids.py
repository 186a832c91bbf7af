"""The longest ids the web chat accepts are stored on PostgreSQL too (its varchar(255) key column)."""

from __future__ import annotations

import asyncio

import pytest

from tests.conftest import app_client, drop_postgres, fresh_postgres_url

LONGEST = "s" * 128  # the longest session_id and message_id the route accepts


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
async def test_the_longest_session_and_message_ids_are_stored_and_answered_once(tmp_path, database) -> None:
    database_url = None
    if database == "postgresql":
        database_url = await asyncio.to_thread(fresh_postgres_url, "gw_webids")
        if database_url is None:
            pytest.skip("PostgreSQL unreachable")
    try:
        async with app_client(tmp_path, bots=[{"name": "acme", "channels": {"web": {}}}],
                              database_url=database_url) as client:
            body = {"session_id": LONGEST, "message_id": "m" * 128, "text": "Do you have a student discount?"}
            first = await client.post("/v1/bots/acme/chat", json=body)
            again = await client.post("/v1/bots/acme/chat", json=body)
            other = await client.post("/v1/bots/acme/chat", json=body | {"message_id": "m" * 127 + "n"})
            transcript = (await client.get(f"/v1/bots/acme/sessions/{LONGEST}/messages")).json()
    finally:
        if database_url:
            await asyncio.to_thread(drop_postgres, database_url)
    assert first.status_code == 200, first.text
    assert again.status_code == 200 and again.json()["message_id"] == first.json()["message_id"]
    assert other.status_code == 200 and other.json()["message_id"] != first.json()["message_id"]
    inbound = [m for m in transcript["messages"] if m["direction"] == "in"]
    assert len(inbound) == 2  # the repeat was answered from the stored reply, not stored again
