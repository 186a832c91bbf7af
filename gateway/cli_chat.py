"""`gateway chat`: a terminal chat with a bot, through a running server or with the bot loaded here."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

from gateway.admin_client import chat_via_server
from gateway.errors import IndexBusy
from gateway.preflight import models_missing_keys, require_schema, uncalibrated_gates


async def chat(args, settings) -> int:
    """`gateway chat`: through a running server's web chat, else with the bot loaded here."""
    from gateway.observability.logs import configure_logging_for
    from gateway.operators.slack_access import unguarded_notes
    from gateway.terminal_chat import converse
    from rag.index_lock import folder_in_use

    configure_logging_for(settings, level="WARNING", fmt="console")
    await require_schema(settings)
    bot = settings.bot(args.bot) if args.bot else (settings.bots[0] if settings.bots else None)
    if bot is None:
        print(f"error: no bots configured in {settings.config_path or 'the config file'}: add one under `bots:` "
              "(README.md, Configuration)", file=sys.stderr)
        return 2
    for warning in [*uncalibrated_gates(settings, [bot]), *models_missing_keys(settings),  # serve logs them
                    *unguarded_notes(settings)]:
        print(f"note: {warning}", file=sys.stderr)
    session_id = f"terminal-{uuid.uuid4().hex}"  # a bearer secret on a server: 128 random bits
    if folder_in_use(settings.qdrant):  # a running server holds the index: no model or index of ours is needed
        return await chat_via_server(settings, bot.name, session_id=session_id, converse=converse)
    from channels.web import WebAdapter
    from gateway.http.webchat import wait_for_reply
    from gateway.models import ConversationRef, InboundMessage, Sender
    from gateway.services import build_services
    from storage import repositories as repo

    # Loading LiteLLM, the encoder and the index took 10-30 s of silence, which read as a hang.
    held = "" if settings.qdrant.url else f"no server holds {settings.qdrant.path}; "  # a Qdrant server is never held
    print(f"{held}loading bot {bot.name!r} here (10-30 s)…", file=sys.stderr)
    # The server's own warnings (llm.call_failed, …) were printed between the prompts, in the middle of the chat.
    log_file = Path(settings.qdrant.path).parent / "chat.log" if settings.qdrant.path else Path("var/chat.log")
    print(f"note: its log lines (warnings such as llm.call_failed) go to {log_file}, not this screen", file=sys.stderr)
    configure_logging_for(settings, level="WARNING", fmt="console", log_file=log_file)
    svc = build_services(settings, with_scheduler=False, poll_interval=0.2)
    # The terminal is a web chat session: for a bot without the web chat, each reply was shown, then
    # logged and stored as not delivered ("channel 'web' is not enabled").
    svc.adapters.setdefault((bot.name, "web"), WebAdapter(bot.name))
    try:
        await svc.start(scheduler=False, channels=False)
    except IndexBusy:  # a server that took the folder since the check above
        await svc.stop()
        return await chat_via_server(settings, bot.name, session_id=session_id, converse=converse)
    if bot.sources and await svc.knowledge.index.count(bot.name) == 0:
        # `serve` ingests an empty index at start; here every question would get the fallback, unexplained.
        print(f"note: bot {bot.name!r} has nothing in its index yet: run `gateway ingest` first (or `gateway "
              "serve`, which ingests an empty index at start)", file=sys.stderr)
    ref = ConversationRef(channel="web", chat=session_id)

    async def ask(text: str) -> dict:
        message = InboundMessage(channel="web", external_id=uuid.uuid4().hex, conversation=ref,
                                 sender=Sender(external_id=session_id, display_name="Terminal"), text=text)
        accepted = await svc.inbox.accept(bot.name, message)
        return await wait_for_reply(svc, accepted.message_id, timeout=120)

    async def follow(after: int) -> list[dict]:
        async with svc.sessions() as session:
            conversation = await repo.find_conversation(session, bot=bot.name, ref=ref)
            rows = await repo.transcript(session, conversation_id=conversation.id, after_id=after) if conversation else []
        return [{"id": m.id, "direction": m.direction, "author": m.author, "text": m.text}
                for m in rows if m.status != "ignored"]

    try:
        return await converse(bot.name, ask, follow)
    finally:
        await svc.stop()
