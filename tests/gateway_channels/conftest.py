"""Shared helpers for the channel end-to-end tests: the real app, a tiny knowledge base, polling waits.

Each test module builds ONE app (module scope) for its channel, because loading the embedding model
and ingesting is the slow part. Tests keep apart by using their own chat ids.
"""

from __future__ import annotations

import asyncio
import inspect
import shutil
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from sqlalchemy import func, select

from gateway.app import create_app
from gateway.models import utcnow
from gateway.services import Services
from gateway.settings import load_settings
from storage import repositories as repo
from storage.models import Conversation, Delivery, EarlyReceipt, Message
from tests.conftest import ROOT, upgrade_new, write_config

KB_FILES = ("plans-and-pricing.md",)
QUESTION = "How much does the Plus plan cost?"
FALLBACK = "I couldn't find that in the Acme help center."
GREETING = "Hello from Acme support! Ask me about plans, billing or your account."


def bot_config(tmp_path: Path, channels: dict[str, Any]) -> dict[str, Any]:
    """The test bot: one help-center document as its knowledge, the given channels."""
    docs = tmp_path / "docs"
    docs.mkdir(exist_ok=True)
    for name in KB_FILES:
        shutil.copy(ROOT / "examples" / "help-center" / name, docs / name)
    return {"name": "acme", "fallback_text": FALLBACK,
            "sources": [{"name": "help", "type": "directory", "path": str(docs), "schedule": "0 3 * * *"}],
            "channels": {"web": {}, **channels}}


@asynccontextmanager
async def gateway_app(tmp_path: Path, *, channels: dict[str, Any], env: dict[str, str], start_channels: bool = False,
                      bot: dict[str, Any] | None = None, database_url: str | None = None,
                      top: dict[str, Any] | None = None) -> AsyncIterator[tuple[httpx.AsyncClient, Services]]:
    """The real app for one bot with these channels (and the other bot keys in `bot`, top-level config keys
    such as `models` in `top`); secrets come from `env` as `${VAR}` references. Its database is SQLite in
    `tmp_path` unless `database_url` says otherwise."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        settings = load_settings(write_config(tmp_path, bots=[bot_config(tmp_path, channels) | (bot or {})],
                                              database_url=database_url, **(top or {})))
    await asyncio.to_thread(upgrade_new, settings.database_url)
    app = create_app(settings, start_scheduler=False, start_channels=start_channels)
    services: Services = app.state.services
    async with app.router.lifespan_context(app):
        await services.knowledge.ingest()
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway.test", timeout=60) as client:
            yield client, services


async def wait_until(predicate: Callable[[], Any], *, timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll `predicate` (sync or async) until it returns something truthy; fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def settle(seconds: float = 0.6, *, services: Services | None = None, timeout: float = 30.0) -> None:
    """Give the worker a few poll rounds, to show that something does NOT happen. With `services`, then
    also until nothing is claimable now and no turn is in flight: on a loaded machine the worker may not
    have looked within `seconds`, and a message stored meanwhile must have been handled, not merely
    not yet (a conversation parked for later, a burst's wait or a back-off, is not claimable now)."""
    await asyncio.sleep(seconds)
    if services is None:
        return

    async def idle() -> bool:
        # A lease of the worker's own is a turn in flight too: it is committed before the drain is in `_active`
        # (an await apart), and released only as the drain ends. A park's lease is another owner's.
        async with services.sessions() as session:
            claimable = await repo.conversations_with_work(session, now=utcnow(), limit=1)
            leased = (await session.execute(select(Conversation.id).where(
                Conversation.lease_owner == services.worker.owner).limit(1))).first()
        return not claimable and leased is None and not services.worker._active

    await wait_until(idle, timeout=timeout, what="nothing claimable now and no turn in flight")


async def messages_in_chat(services: Services, *, channel: str, chat: str) -> list[Message]:
    """Every stored message (in and out) of the conversations in one chat, oldest first."""
    async with services.sessions() as session:
        return list((await session.execute(select(Message).join(Conversation, Message.conversation_id == Conversation.id)
                                           .where(Conversation.channel == channel, Conversation.chat == chat)
                                           .order_by(Message.id))).scalars().all())


async def settled_chat(services: Services, *, channel: str, chat: str, count: int = 2) -> list[Message]:
    """The chat's messages once `count` exist and none is still pending or being sent."""
    async def ready() -> list[Message] | None:
        found = await messages_in_chat(services, channel=channel, chat=chat)
        return found if len(found) >= count and all(m.status not in ("pending", "sending") for m in found) else None

    return await wait_until(ready, what=f"{count} settled messages in {channel} chat {chat}")


async def count_messages(services: Services, *, channel: str) -> int:
    """All stored messages of a channel (to prove that nothing was stored)."""
    async with services.sessions() as session:
        return (await session.execute(select(func.count()).select_from(Message)
                                      .where(Message.channel == channel))).scalar_one()


async def deliveries(services: Services, message_id: int) -> list[Delivery]:
    """The Delivery rows (one per platform message) of a reply."""
    async with services.sessions() as session:
        return list((await session.execute(select(Delivery).where(Delivery.message_id == message_id)
                                           .order_by(Delivery.id))).scalars().all())


async def early_receipts(services: Services) -> list[tuple[str, str]]:
    """Parked delivery receipts: (provider id, status)."""
    async with services.sessions() as session:
        rows = (await session.execute(select(EarlyReceipt).order_by(EarlyReceipt.id))).scalars().all()
        return [(r.provider_id, r.status) for r in rows]


async def get_message(services: Services, message_id: int) -> Message:
    """A fresh copy of one stored message."""
    async with services.sessions() as session:
        return await session.get(Message, message_id)


async def store_reply(services: Services, *, conversation_id: int, text: str,
                      citations: list[dict[str, str]] | None = None, author: str = "operator",
                      reply_to_id: int | None = None) -> int:
    """Store an outbound reply in a conversation, as an operator reply would be (or, with `reply_to_id`,
    an answer to that message); returns its id."""
    async with services.sessions() as session, session.begin():
        conversation = await session.get(Conversation, conversation_id)
        message = await repo.add_outbound(session, conversation=conversation, text=text, author=author,
                                          citations=citations or [], reply_to_id=reply_to_id)
        return message.id


async def send_failures(client: httpx.AsyncClient, channel: str) -> float:
    """The current value of gateway_send_failures_total for the test bot on `channel`, from /metrics."""
    return await metric(client, f'gateway_send_failures_total{{bot="acme",channel="{channel}"}}')


async def metric(client: httpx.AsyncClient, series: str) -> float:
    """The current value of one series (`name{labels}` as /metrics writes it), 0 when it is not there yet."""
    for line in (await client.get("/metrics")).text.splitlines():
        if line.startswith(series + " "):
            return float(line.removeprefix(series + " "))
    return 0.0


def replies(messages: list[Message]) -> list[Message]:
    """The outbound messages of a transcript."""
    return [m for m in messages if m.direction == "out"]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def whatsapp_env(tmp_path_factory):
    """The WhatsApp rig (`whatsapp_rig.whatsapp_app`) for a module's tests: (client, services, fake Twilio)."""
    from tests.gateway_channels.whatsapp_rig import whatsapp_app  # the rig imports this module's helpers

    async with whatsapp_app(tmp_path_factory.mktemp("whatsapp")) as rig:
        yield rig
