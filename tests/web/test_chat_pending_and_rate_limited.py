"""Two documented chat outcomes besides an answer: 202 pending after `worker.reply_timeout`, and a
rate-limited message (the notice once per window, then no reply)."""

from __future__ import annotations

import asyncio

from sse_starlette.sse import AppStatus

from tests.conftest import app_client, chat_events

NOTICE = "Slow down, please."


async def _transcript_replies(client, session_id: str) -> list[dict]:
    body = (await client.get(f"/v1/bots/acme/sessions/{session_id}/messages")).json()
    return [m for m in body["messages"] if m["direction"] == "out"]


async def test_chat_past_the_reply_timeout_is_202_pending_and_the_answer_lands_in_the_transcript(tmp_path) -> None:
    worker = {"lease_seconds": 3, "poll_interval": 0.2, "reply_timeout": 0.001}  # no answer is that fast
    async with app_client(tmp_path, bots=[{"name": "acme", "channels": {"web": {}}}], worker=worker) as client:
        response = await client.post("/v1/bots/acme/chat",
                                     json={"session_id": "slow-1", "text": "Hello?", "message_id": "m-1"})
        body = response.json()
        assert response.status_code == 202
        assert body["pending"] is True and body["reply"] is None and body["state"] == "bot"
        for _ in range(150):  # the worker still answers it
            replies = await _transcript_replies(client, "slow-1")
            if replies:
                break
            await asyncio.sleep(0.2)
        assert replies and replies[0]["author"] == "bot" and replies[0]["text"]
        again = await client.post("/v1/bots/acme/chat",
                                  json={"session_id": "slow-1", "text": "Hello?", "message_id": "m-1"})
        assert again.status_code == 200 and again.json()["reply"] == replies[0]["text"]


async def test_chat_over_the_contact_rate_limit_gets_the_notice_once_then_no_reply(tmp_path) -> None:
    bot = {"name": "acme", "channels": {"web": {}}, "rate_limit": {"per_contact_per_minute": 1, "notice": NOTICE}}
    async with app_client(tmp_path, bots=[bot]) as client:
        bodies = []
        for i in range(3):
            response = await client.post("/v1/bots/acme/chat", json={"session_id": "busy-1", "text": f"Question {i}?"})
            assert response.status_code == 200, response.text
            bodies.append(response.json())
    assert bodies[0]["reply"] not in (None, NOTICE)
    assert [(b["reply"], b["state"], b["citations"]) for b in bodies[1:]] == [(NOTICE, "bot", []), (None, "bot", [])]


async def test_chat_waiting_when_the_process_is_asked_to_stop_is_202_pending_not_a_cut_off_500(tmp_path) -> None:
    # SIGTERM: uvicorn waits 5 s for open requests, then cancels them (a plain-text 500). A request
    # waiting for its answer returns `pending` at once instead; the answer is given after the restart.
    worker = {"lease_seconds": 3, "poll_interval": 0.2, "reply_timeout": 60}
    async with app_client(tmp_path, bots=[{"name": "acme", "channels": {"web": {}}}], worker=worker) as client:
        await client.services.worker.stop()  # this process answers nothing more: it is stopping
        client.services.stopping.set()
        response = await asyncio.wait_for(client.post(
            "/v1/bots/acme/chat", json={"session_id": "stop-1", "text": "Hello?", "message_id": "m-1"}), timeout=20)
        assert response.status_code == 202 and response.json()["pending"] is True
        streamed = await asyncio.wait_for(client.post(
            "/v1/bots/acme/chat", headers={"accept": "text/event-stream"},
            json={"session_id": "stop-1", "text": "Still there?", "message_id": "m-2"}), timeout=20)
        assert streamed.status_code == 200 and '"pending": true' in streamed.text


async def test_chat_stream_open_when_the_server_shuts_down_ends_with_done_pending_not_a_cut_body(tmp_path) -> None:
    # sse-starlette cancels every open stream as soon as uvicorn is told to exit (SIGTERM), which cut the
    # body off before its `done` event: a client was left with a broken stream and no message id. The
    # stream now ends itself, with `done` and `pending: true`, as a JSON request gets its 202.
    worker = {"lease_seconds": 3, "poll_interval": 0.2, "reply_timeout": 60}
    async with app_client(tmp_path, bots=[{"name": "acme", "channels": {"web": {}}}], worker=worker) as client:
        await client.services.worker.stop()  # no answer comes: the stream is still open at the shutdown

        async def shut_down_soon() -> None:
            await asyncio.sleep(1.0)
            AppStatus.should_exit = True  # what sse-starlette's hook on uvicorn's handle_exit sets

        shutdown = asyncio.create_task(shut_down_soon())
        try:
            events = await asyncio.wait_for(chat_events(client, "acme", "stop-2", "Still there?"), timeout=20)
        finally:
            await shutdown
            AppStatus.should_exit = False  # process-wide: later tests' streams must not end at once
    assert events and events[-1][0] == "done", events
    assert events[-1][1]["pending"] is True and events[-1][1]["reply"] is None
