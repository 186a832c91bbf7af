"""The composed services of one gateway process, built from settings and started by the lifespan."""

from __future__ import annotations

import asyncio
import functools
import importlib
import os
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from channels.base import ChannelAdapter
from channels.web import WebAdapter
from gateway.admin_client import admin_files
from gateway.background import cancel, settle
from gateway.budget import DailyBudget
from gateway.delivery.outbox import HEARTBEAT_S, Outbox
from gateway.errors import ChannelSendError
from gateway.escalation.handoff import Escalations
from gateway.events import EventBus
from gateway.inbox import Inbox
from gateway.knowledge import Knowledge
from gateway.leader import LeaderElection
from gateway.llm import LLMRouter
from gateway.llm_retry import RetryPolicy
from gateway.observability.logs import enable_langfuse
from gateway.observability.metrics import Metrics
from gateway.observability.repeats import RepeatLog
from gateway.operators.auth import OperatorAuth
from gateway.operators.reminders import HandoffReminders
from gateway.operators.slack_actions import ClickWork, interactive_handler
from gateway.operators.slack_names import SlackOperatorNames
from gateway.operators.slack_operator import SlackOperatorChannel
from gateway.pg_bridge import PgBridge
from gateway.pipeline import Pipeline
from gateway.pipeline.answer import Answerer
from gateway.pipeline.rewrite import Rewriter
from gateway.pipeline.tools import BotTools
from gateway.ratelimit import RateLimiter
from gateway.retention import run_retention
from gateway.scheduler import IngestScheduler
from gateway.settings import Settings
from gateway.worker import Worker
from storage.engine import create_engine, session_factory

log = structlog.get_logger("gateway.services")

ESCALATION_DRAIN_S = 3.0
"""How long a stop waits for escalation side effects (operator-channel posts) after the worker's 10 s."""
STOP_STEP_S = 2.0
"""How long a stop waits for each of its other steps (the leader, the reminders, the channels, the
PostgreSQL bridge) before it abandons that step, logs it, and goes on with the rest."""
LATE_STORE_STOP_S = 10.0
"""How long a stop waits for webhook stores still going after their response was sent (a Discord `/ask`
deferred while the database was slow), counted from the stop's start: alongside the worker's own 10 s, so it
adds nothing to the stop's worst case, and before the channels stop, so a store given up can still be said."""

ADAPTER_CLASSES = {
    "telegram": "channels.telegram:TelegramAdapter",
    "slack": "channels.slack:SlackAdapter",
    "discord": "channels.discord:DiscordAdapter",
    "whatsapp": "channels.whatsapp:WhatsAppAdapter",
}


def build_adapters(settings: Settings) -> dict[tuple[str, str], ChannelAdapter]:
    """One adapter per enabled (bot, channel)."""
    adapters: dict[tuple[str, str], ChannelAdapter] = {}
    for bot in settings.bots:
        for channel in ("web", *ADAPTER_CLASSES):
            config = getattr(bot.channels, channel)
            if config is None or not config.enabled:
                continue
            if channel == "web":
                adapters[(bot.name, "web")] = WebAdapter(bot.name, config)
                continue
            module_name, _, cls_name = ADAPTER_CLASSES[channel].partition(":")
            cls = getattr(importlib.import_module(module_name), cls_name)
            # Discord alone answers on the spot in the bot's words (a slash command other than /ask).
            extra = {"use_ask": bot.replies.use_ask, "not_stored": bot.replies.outage("failure", escalates=False)
                     } if channel == "discord" else {}
            adapters[(bot.name, channel)] = cls(bot.name, config, **extra)
    return adapters


@dataclass
class Services:
    """Everything a request handler or CLI command needs, built once per process."""

    settings: Settings
    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    bus: EventBus
    metrics: Metrics
    adapters: dict[tuple[str, str], ChannelAdapter]
    knowledge: Knowledge
    llm: LLMRouter
    pipeline: Pipeline
    outbox: Outbox
    inbox: Inbox
    worker: Worker
    escalations: Escalations
    scheduler: IngestScheduler | None = None
    leader: LeaderElection | None = None
    operator_auth: OperatorAuth | None = None
    slack_operator: SlackOperatorChannel | None = None
    slack_clicks: ClickWork | None = None  # its buttons' clicks, acknowledged and still being acted on
    slack_names: SlackOperatorNames | None = None  # Slack operators' names, for the console
    reminders: HandoffReminders | None = None
    rate_limiter: RateLimiter | None = None
    budget: DailyBudget | None = None  # each bot's daily model spending: turns and operator summaries
    reply_timeout: float = 60.0
    admin_token_path: Path | None = None
    admin_url_path: Path | None = None
    admin_url: str | None = None  # where this process listens, for the CLI beside it (`admin_files`)
    role: str = "all"  # "web": receive only (webhooks, web chat, operators); the worker runs elsewhere
    pg_bridge: PgBridge | None = None
    admin_token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the process is asked to stop: requests waiting for an answer return `pending` at once
    (the answer is stored and read later) rather than be cut off by the server's shutdown."""
    signature_log: RepeatLog = field(default_factory=RepeatLog)
    """Badly signed webhooks per bot and channel: the first few logged, then a count a minute."""
    late_stores: set[asyncio.Task] = field(default_factory=set)
    """Webhook messages still being stored after their platform got its answer (`WebhookResult.respond_within`):
    waited for at stop, before the database closes."""
    _wrote_admin_files: bool = False
    _started: list[Any] = field(default_factory=list)
    start_failures: dict[tuple[str, str], str] = field(default_factory=dict)
    """The channels whose start failed (a rejected token), and why: `gateway.started` and `/readyz` say so."""

    def begin_stop(self) -> None:
        """The process is asked to stop (SIGTERM), before the server's wait for open requests: those
        waiting for an answer return `pending`, and the worker takes no new turn (`stop` comes after)."""
        self.stopping.set()
        self.worker.stop_claiming()

    async def start(self, *, worker: bool = True, scheduler: bool = True, channels: bool = True) -> None:
        """Open the index, start the worker, the scheduler and the channels' long-lived connections.
        With `role == "web"` only the receiving side runs: webhooks, web chat, operators (README)."""
        if self.rate_limiter is not None:  # a Redis down is said now, not at the first message (fails open)
            await self.rate_limiter.check_at_start()
        if PgBridge.applies_to(self.settings.database_url):
            wake = self.worker.notify if worker and self.role != "web" else None
            self.pg_bridge = PgBridge(self.settings.database_url, sessions=self.sessions, bus=self.bus, wake=wake)
            self.pg_bridge.start()
        if self.role == "web":
            log.info("gateway.role", role="web", note="no worker, scheduler, index or channel connections here")
            return
        await self.knowledge.open()
        await self.knowledge.mark_interrupted_runs()  # before the scheduler starts runs of its own
        # Before the worker and the server's ready: what a first turn would load (bench/first_turns.py).
        await self.knowledge.warm_up()
        await self.llm.warm_up()
        self._write_admin_files()
        await self.outbox.recover()
        if worker:
            await self.worker.start()
            if self.reminders is not None:
                self.reminders.start()
        if scheduler and self.scheduler is not None:
            if self.leader is not None:
                await self.leader.start()
            self.scheduler.start()
        if channels:
            for (bot, name), adapter in self.adapters.items():
                try:
                    await adapter.start(self._deliver_for(bot))
                    self._started.append(adapter)
                except ChannelSendError as exc:  # said by the channel (a rejected token): one line, no traceback
                    self.start_failures[(bot, name)] = f"not started: {exc}"[:200]
                    log.error("channel.start_failed", bot=bot, channel=name, error=str(exc)[:200],
                              hint=f"check the {name} channel's token in the config and the environment "
                                   "variable it names; restart to try again")
                except Exception as exc:
                    self.start_failures[(bot, name)] = f"not started: {type(exc).__name__}"
                    log.exception("channel.start_failed", bot=bot, channel=name)

    def _write_admin_files(self) -> None:
        """Write the admin token (and this server's URL) beside the Qdrant folder. Why: the CLI on this
        machine reads them to ingest through the running server (Qdrant local mode allows one process
        per folder). Only users who can read var/ can use them."""
        if self.admin_token_path is None:
            return
        self.admin_token_path.parent.mkdir(parents=True, exist_ok=True)
        self.admin_token_path.unlink(missing_ok=True)  # created anew below, never readable by others
        fd = os.open(self.admin_token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as token_file:
            token_file.write(self.admin_token)
        self._wrote_admin_files = True
        if self.admin_url and self.admin_url_path is not None:
            # So `gateway ingest` finds this server on whatever port it was started with.
            self.admin_url_path.write_text(self.admin_url)

    def _deliver_for(self, bot: str):
        async def deliver(message) -> None:
            accepted = await self.inbox.accept(bot, message)
            if accepted is not None:  # None: logged as inbound.ignored, with its reason
                self.metrics.message_in(bot=bot, channel=message.channel, duplicate=accepted.duplicate)
        return deliver

    async def stop(self) -> None:
        """Stop everything `start` started, then close the stores. The channels go last: the turns
        the worker finishes, the reminders and the operator notices still send through them."""
        # From the start: a store given 2 s, as the other steps are, was cut off by a database that paused a
        # moment, and the question with it; these run alongside the steps below.
        late_stores = asyncio.ensure_future(settle(self.late_stores, timeout=LATE_STORE_STOP_S))
        if self.scheduler is not None:
            self.scheduler.shutdown()
        # Each step bounded (STOP_STEP_S), as the worker and the drain are: one that hangs (a database or a
        # platform that stopped answering) held the whole stop, past any container's grace period.
        if self.leader is not None:
            await _bounded_step("leader.stop", self.leader.stop)
        if self.reminders is not None:
            await _bounded_step("reminders.stop", self.reminders.stop)
        await self.worker.stop()
        if self.slack_clicks is not None:  # before the escalations' drain: a click's claim adds to it
            await self.slack_clicks.drain(timeout=STOP_STEP_S)
        # Bounded: a hanging operator-channel post must not hold the exit past the documented bound.
        await self.escalations.drain(timeout=ESCALATION_DRAIN_S)
        if still_storing := await late_stores:
            # Cancelled, each sender is told its question was not stored (`webhook.store_failed`), through
            # the channels, which are still up: no answer would come, and Discord showed "thinking…" 15 min.
            await _bounded_step("webhook.late_stores", functools.partial(cancel, still_storing))
        # Every adapter, started or not: stop() also closes the HTTP sessions that sends opened (a send
        # after it would open a new one, which nothing closes). What arrives meanwhile is stored, and
        # answered after the restart. Side by side: each channel's bound is not added to the others'.
        await asyncio.gather(*(_bounded_step("adapter.stop", adapter.stop, bot=bot, channel=name)
                               for (bot, name), adapter in reversed(list(self.adapters.items()))))
        self._started.clear()
        if self.pg_bridge is not None:
            await _bounded_step("pg_bridge.stop", self.pg_bridge.stop)
        await self.knowledge.close()
        await self.engine.dispose()
        # Only files this process wrote: a CLI that found the index busy must not remove the server's.
        if self._wrote_admin_files and self.admin_token_path is not None and self.admin_token_path.exists():
            self.admin_token_path.unlink(missing_ok=True)
            if self.admin_url_path is not None:
                self.admin_url_path.unlink(missing_ok=True)


async def _bounded_step(step: str, stop: Callable[[], Awaitable[Any]], **fields: Any) -> None:
    """Run one step of a stop for at most STOP_STEP_S. One still running then is cancelled (not waited
    for: it may ignore that too) and logged as `gateway.stop_step_timed_out`; one that fails is logged;
    either way the stop goes on with its other steps."""
    task = asyncio.ensure_future(stop())
    await asyncio.wait({task}, timeout=STOP_STEP_S)
    if not task.done():
        task.cancel()
        log.warning("gateway.stop_step_timed_out", step=step, wait_s=STOP_STEP_S, **fields)
    elif not task.cancelled() and (exc := task.exception()) is not None:
        log.error("gateway.stop_step_failed", step=step, **fields, exc_info=exc)


def build_services(settings: Settings, *, poll_interval: float | None = None,
                   with_scheduler: bool = True) -> Services:
    """Wire the whole gateway from settings. Nothing starts until `Services.start()`."""
    engine = create_engine(settings.database_url)
    sessions = session_factory(engine)
    bus = EventBus()
    metrics = Metrics()
    adapters = build_adapters(settings)
    knowledge = Knowledge(settings, sessions=sessions, metrics=metrics)
    llm = LLMRouter.from_settings(settings, timeout=settings.llm.timeout, retry=RetryPolicy(
        num_retries=settings.llm.num_retries, backoff_base=settings.llm.backoff_base,
        backoff_max=settings.llm.backoff_max), cooldown=settings.llm.cooldown_seconds, metrics=metrics)
    tools = {bot.name: BotTools(bot) for bot in settings.bots}
    budget = DailyBudget(sessions, metrics=metrics)
    pipeline = Pipeline(search=knowledge, answerer=Answerer(llm, tools=tools), rewriter=Rewriter(llm),
                        metrics=metrics, budget=budget)
    # A live send must refresh its row well inside the two lease periods after which it counts as dead.
    outbox = Outbox(sessions, adapters=adapters, bus=bus, metrics=metrics,
                    heartbeat_s=min(HEARTBEAT_S, settings.worker.lease_seconds / 2),
                    sources_headings={bot.name: bot.replies.sources_heading for bot in settings.bots})
    escalations = Escalations(sessions, settings=settings, bus=bus, metrics=metrics, outbox=outbox)
    slack_operator = SlackOperatorChannel(sessions, settings=settings, escalations=escalations, adapters=adapters,
                                          llm=llm, budget=budget)
    escalations.listeners.append(slack_operator.on_event)
    slack_clicks = ClickWork(slack_operator)
    for (bot_name, channel), adapter in adapters.items():
        if channel == "slack":  # its buttons' clicks, when they come over Socket Mode
            adapter.on_interactive = interactive_handler(slack_clicks, bot_name)
    outbox.tell_escalation = escalations.emit  # built after the outbox, which it sends with
    reminders = HandoffReminders(sessions, settings=settings, escalations=escalations,
                                 checks=[slack_operator.post_missing_headers, slack_operator.relay_missed])
    worker = Worker(sessions, settings, pipeline=pipeline, outbox=outbox, bus=bus, metrics=metrics,
                    lease_seconds=settings.worker.lease_seconds, concurrency=settings.worker.concurrency,
                    poll_interval=poll_interval or settings.worker.poll_interval, on_escalate=escalations.open_in,
                    adapters=adapters, intercept=slack_operator.intercept,
                    on_handoff_message=escalations.customer_message)
    inbox = Inbox(sessions, on_stored=worker.notify)
    reminders.checks.append(inbox.finish_moves)  # chat moves left unfinished, by this process or another
    # Scale-out: rate limits before the pipeline, timed sends, and scheduled jobs only on the leader.
    rate_limiter = RateLimiter.from_settings(settings, metrics=metrics)
    worker.handler.rate_limiter = rate_limiter
    outbox.deliver = metrics.timed("send", outbox.deliver)
    enable_langfuse(settings.langfuse)
    leader = LeaderElection(settings.database_url) if with_scheduler else None
    scheduler = IngestScheduler(settings, knowledge=knowledge, leader=leader) if with_scheduler else None
    if scheduler is not None:
        scheduler.add_job("retention", functools.partial(run_retention, sessions, settings, knowledge=knowledge),
                          cron=settings.retention_schedule)
    admin_path = admin_url_path = None
    if settings.qdrant.path and not settings.qdrant.url:
        admin_path, admin_url_path = admin_files(settings.qdrant.path)
    services = Services(settings=settings, engine=engine, sessions=sessions, bus=bus, metrics=metrics, adapters=adapters,
                    knowledge=knowledge, llm=llm, pipeline=pipeline, outbox=outbox, inbox=inbox, worker=worker,
                    escalations=escalations, scheduler=scheduler, operator_auth=OperatorAuth(settings),
                    slack_operator=slack_operator, slack_clicks=slack_clicks, slack_names=SlackOperatorNames(adapters),
                    reminders=reminders,
                    admin_token_path=admin_path, admin_url_path=admin_url_path,
                    reply_timeout=settings.worker.reply_timeout, rate_limiter=rate_limiter, budget=budget)
    services.leader = leader
    return services
