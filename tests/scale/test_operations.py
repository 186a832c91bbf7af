"""Operations through the real app: rate limits in the worker, /metrics, JSON logs with ids, Langfuse switch."""

from __future__ import annotations

import asyncio
import json

import httpx
import litellm
from sqlalchemy import select

from gateway.app import create_app
from gateway.observability.logs import enable_langfuse
from gateway.observability.tracing import RequestContextMiddleware, trace_id_from_headers
from gateway.settings import load_settings
from storage.models import Conversation, Message
from tests.conftest import upgrade, write_config


async def test_operations_rate_limit_metrics_and_json_logs(tmp_path, capsys) -> None:
    bot = {"name": "acme", "channels": {"web": {}}, "rate_limit": {"per_contact_per_minute": 2}}
    settings = load_settings(write_config(tmp_path, bots=[bot], log_format="json", log_level="INFO"))
    await asyncio.to_thread(upgrade, settings.database_url)
    app = create_app(settings, start_scheduler=False)
    app.add_middleware(RequestContextMiddleware, metrics=app.state.services.metrics)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw.test",
                                     timeout=60) as http:
            replies = []
            for i in range(4):
                response = await http.post("/v1/bots/acme/chat", json={"session_id": "rl-1", "text": f"question {i}"},
                                           headers={"traceparent": f"00-{'ab' * 16}-{'cd' * 8}-01"})
                assert response.status_code == 200
                replies.append(response.json()["reply"])
            metrics = (await http.get("/metrics")).text
        async with app.state.services.sessions() as session:
            conversation = (await session.execute(select(Conversation).where(Conversation.chat == "rl-1"))).scalar_one()
            inbound = list((await session.execute(select(Message).where(
                Message.conversation_id == conversation.id, Message.direction == "in").order_by(Message.id))).scalars())
    notice = settings.bots[0].rate_limit.notice
    # Two answered normally, the third gets the notice once, the fourth is quiet; all four stored.
    assert replies[2] == notice and replies[3] is None
    assert notice not in replies[:2] and all(r for r in replies[:2])
    assert len(inbound) == 4 and [m.error for m in inbound][2:] == ["rate limited (contact)"] * 2
    assert 'gateway_rate_limited_total{bot="acme",scope="contact"} 2.0' in metrics
    assert 'gateway_messages_in_total{bot="acme",channel="web"}' in metrics
    assert 'gateway_messages_out_total{bot="acme",channel="web",status="sent"} 3.0' in metrics
    for stage in ("send", "llm", "pipeline"):
        assert f'gateway_stage_seconds_count{{stage="{stage}"}}' in metrics, stage
    assert "gateway_queue_depth 0.0" in metrics and "gateway_queue_lag_seconds 0.0" in metrics
    assert "gateway_llm_tokens_total{" in metrics and "gateway_send_failures_total" in metrics
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    worker_lines = [e for e in lines if e.get("event") == "pipeline.done"]
    assert worker_lines and all(e["conversation_id"] == conversation.id and e["message_id"] in {m.id for m in inbound}
                                for e in worker_lines)
    # The worker continues the trace of the request that stored the message (its traceparent header).
    assert {e["trace_id"] for e in worker_lines} == {"ab" * 16}


def test_operations_trace_id_honours_traceparent() -> None:
    assert trace_id_from_headers({"traceparent": f"00-{'ab' * 16}-{'cd' * 8}-01"}) == "ab" * 16
    fresh = trace_id_from_headers({"traceparent": "garbage"})
    assert len(fresh) == 32 and fresh != trace_id_from_headers({})


def test_operations_langfuse_switch_sets_litellm_callbacks(tmp_path) -> None:
    before = (list(litellm.success_callback or []), list(litellm.failure_callback or []))
    try:
        assert enable_langfuse(True) is True
        assert litellm.success_callback.count("langfuse") == 1 and "langfuse" in litellm.failure_callback
        enable_langfuse(True)  # idempotent
        assert litellm.success_callback.count("langfuse") == 1
        enable_langfuse(False)
        assert "langfuse" not in litellm.success_callback
        settings = load_settings(write_config(tmp_path, langfuse=True))
        from gateway.services import build_services

        build_services(settings, with_scheduler=False)
        assert "langfuse" in litellm.success_callback
    finally:
        litellm.success_callback, litellm.failure_callback = before
