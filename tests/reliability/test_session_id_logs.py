"""A web chat session id is a credential (it reads the transcript and writes as the visitor: README, Tools), so
no log line may carry it: not the access log's path (tests/test_otel.py), nor the inbox's own lines."""

from __future__ import annotations

import logging
import secrets

from tests.reliability.conftest import running_app


async def test_web_session_id_is_in_no_log_line(tmp_path, capfd, caplog):
    caplog.set_level(logging.INFO)  # the app logs at DEBUG (log_level); INFO keeps out sqlite statements
    session_id = "web-" + secrets.token_hex(16)
    async with running_app(tmp_path, bots=[{"name": "acme"}], log_level="DEBUG") as (client, _):
        body = {"session_id": session_id, "text": "How do I reset my password?", "message_id": "m-1"}
        first = await client.post("/v1/bots/acme/chat", json=body)
        again = await client.post("/v1/bots/acme/chat", json=body)  # a retry: logged as inbound.duplicate
        transcript = await client.get(f"/v1/bots/acme/sessions/{session_id}/messages")
    assert first.status_code == again.status_code == 200
    assert first.json()["message_id"] == again.json()["message_id"]
    assert [m["direction"] for m in transcript.json()["messages"]] == ["in", "out"]
    out, err = capfd.readouterr()
    logs = out + err + caplog.text
    assert "inbound.stored" in logs and "inbound.duplicate" in logs  # the capture saw the inbox's lines
    assert session_id not in logs
    assert session_id[-12:] not in logs  # nor a telling part of it


async def test_web_session_id_is_in_no_log_line_of_a_retry_after_forget(tmp_path, capfd, caplog):
    # A retry of a message `gateway forget` deleted is logged as inbound.ignored: with the whole external_id,
    # '<session_id>/<message_id>', where the other inbound.* lines mask the session id.
    from gateway.retention import forget_contact

    caplog.set_level(logging.INFO)
    session_id = "web-" + secrets.token_hex(16)
    async with running_app(tmp_path, bots=[{"name": "acme"}], log_level="DEBUG") as (client, services):
        body = {"session_id": session_id, "text": "How do I reset my password?", "message_id": "m-1"}
        assert (await client.post("/v1/bots/acme/chat", json=body)).status_code == 200
        report = await forget_contact(services.sessions, channel="web", user=session_id)
        again = await client.post("/v1/bots/acme/chat", json=body)
    assert report.messages == 2
    assert again.status_code == 409, again.text
    out, err = capfd.readouterr()
    logs = out + err + caplog.text
    assert "inbound.ignored" in logs and "…/m-1" in logs  # the capture saw the line, its message id masked
    assert session_id not in logs
    assert session_id[-12:] not in logs
