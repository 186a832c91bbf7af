"""The command line: serve, ingest, ingest-runs, eval, chat, forget, db upgrade, telegram set-webhook."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from pathlib import Path

import structlog

from gateway import __version__
from gateway.admin_client import admin_files, local_url
from gateway.cli_output import Terminated, hide_run_errors_in_logs, print_metrics, print_misses, progress_bar
from gateway.errors import SKIPPED_FILES, ConfigError, GatewayError, IndexBusy, UnknownBot
from gateway.models import CHANNELS
from gateway.preflight import (
    alembic_config,
    check_embedding_model,
    migration_revisions,
    redacted_db_url,
    require_free_port,
    require_schema,
    schema_revision,
    uncalibrated_gates,
)
from gateway.process_exit import exit_after_stop

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

GRACEFUL_SHUTDOWN_S = 5
"""How long `serve` waits for open requests on shutdown: open SSE streams (console, widget) never end by themselves."""


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose missing COMMAND names the commands (`gateway` alone said only "the following
    arguments are required: COMMAND"). Subcommands' parsers are of this class too."""

    def error(self, message: str):
        subs = [a for a in self._actions if isinstance(a, argparse._SubParsersAction)]
        if subs and message.endswith("required: COMMAND"):
            message += f" (one of: {', '.join(subs[0].choices)})"
        super().error(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="gateway", description="Multi-channel bot gateway",
        epilog="Every command that takes --config reads FILE, else $GATEWAY_CONFIG, else ./config.yaml. "
               "`gateway COMMAND --help` tells a command's options.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}",
                        help="print the gateway's version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(parent, name: str, summary: str, details: str = "") -> argparse.ArgumentParser:
        # The summary is the overview's line; `COMMAND --help` began with the options, saying nothing of it.
        return parent.add_parser(name, help=summary, description=f"{summary[0].upper()}{summary[1:]}.{details}")

    def with_config(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--config", metavar="FILE", help="config file (default: $GATEWAY_CONFIG or ./config.yaml)")
        return p

    serve = with_config(command(sub, "serve", "run the HTTP server, worker, scheduler and channels"))
    serve.add_argument("--host", metavar="H", default=os.environ.get("HOST", "127.0.0.1"),
                       help="address to listen on (default: $HOST or 127.0.0.1)")
    # A string: argparse converts it only for `serve`, where `PORT=abc` is then a usage error, not a traceback.
    serve.add_argument("--port", metavar="P", type=_port, default=os.environ.get("PORT", "8000"),
                       help="port to listen on (default: $PORT or 8000)")
    serve.add_argument("--role", choices=["all", "web"], default="all",
                       help="all: everything (default); web: only receive webhooks, web chat and operators, "
                            "while one `all` process runs the worker, scheduler and index")

    ingest = with_config(command(sub, "ingest", "ingest the knowledge sources now",
                                 " While a server holds the index, the server does it."))
    ingest.add_argument("--bot", metavar="NAME", help="only this bot's sources")
    ingest.add_argument("--source", metavar="NAME", help="only the sources of this name")
    ingest.add_argument("--json", action="store_true", help="print the counts as JSON")

    runs = with_config(command(sub, "ingest-runs", "show the recorded ingest runs, newest first"))
    runs.add_argument("--bot", metavar="NAME", help="only this bot's runs")
    runs.add_argument("--source", metavar="NAME", help="only the runs of the sources of this name")
    runs.add_argument("--limit", metavar="N", type=_positive_int, default=20, help="runs shown (default 20)")
    runs.add_argument("--json", action="store_true", help="print the runs as JSON")

    ev = command(sub, "eval", "retrieval metrics of a document folder against a question file",
                 " The folder is ingested into a throwaway index.")
    ev.add_argument("--config", metavar="FILE",
                    help="the config whose embedding and first bot's retrieval settings it uses (default: "
                         "$GATEWAY_CONFIG or ./config.yaml if there is one, else the built-in defaults)")
    ev.add_argument("--docs", metavar="DIR", required=True,
                    help="folder of documents (Markdown, text, HTML, PDF), read as a directory source is")
    ev.add_argument("--questions", metavar="FILE.jsonl", required=True,
                    help='JSONL, a line each: {"question", "gold_texts": [...]} or {"question", "answerable": false}')
    ev.add_argument("--k", metavar="N", type=_positive_int, default=None,
                    help="also report recall@N, N >= 1 (recall@1/3/5/10 are always there)")
    ev.add_argument("--json", action="store_true", help="print the metrics as JSON")

    chat = with_config(command(sub, "chat", "chat with a bot in the terminal",
                               " While a server holds the index, through that server's web chat."))
    chat.add_argument("--bot", metavar="NAME", help="the bot to chat with (default: the config's first bot)")

    db = command(sub, "db", "database migrations")
    db_sub = db.add_subparsers(dest="db_command", required=True, metavar="COMMAND")
    with_config(command(db_sub, "upgrade", "apply the migrations the database lacks",
                        " `serve` applies none: run this after an upgrade of the gateway."))

    forget = with_config(command(sub, "forget", "delete a contact's messages, conversations and escalations",
                                 " From a group others wrote in too, only their messages and the replies to them."))
    # A channel no contact is stored under ("sms", "Web") deleted nothing and still wrote an audit row.
    forget.add_argument("--channel", required=True, choices=CHANNELS, help="the channel the contact wrote on")
    forget.add_argument("--user", required=True, help="the platform's user id (web: the session id)")
    forget.add_argument("--json", action="store_true", help="print the counts as JSON")

    tg = command(sub, "telegram", "Telegram helpers")
    tg_sub = tg.add_subparsers(dest="tg_command", required=True, metavar="COMMAND")
    hook = with_config(command(tg_sub, "set-webhook", "register <url>/webhooks/<bot>/telegram with Telegram",
                               " With the channel's webhook_secret, which Telegram sends back with every update."))
    hook.add_argument("--bot", metavar="NAME", required=True, help="the bot whose telegram channel to register")
    hook.add_argument("--url", required=True, help="the gateway's public base URL, e.g. https://bots.example.com")
    return parser


def _positive_int(value: str) -> int:
    """argparse type of a count that must be at least 1."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def _port(value: str) -> int:
    """A TCP port: 99999 started everything, then ended in uvicorn's "OverflowError: bind()" tracebacks, and
    argparse's "invalid int value: ''" of `make run PORT=` said nothing of PORT."""
    try:
        port = int(value)
    except ValueError:
        port, value = 0, repr(value)  # `make run PORT=` (an unset variable) is '' here
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"{value} is not a port: give a number from 1 to 65535 (PORT=… with make run)")
    return port


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "serve":
            try:
                return _serve(args)
            except KeyboardInterrupt:  # Ctrl-C before uvicorn took the signals: a stop asked for, as after
                structlog.get_logger().info("gateway.stopped", note="stopped while starting (Ctrl-C)")
                return 0
        if args.command == "db":
            return _db_upgrade(args)
        if args.command == "ingest":
            from gateway.cli_ingest import ingest

            return asyncio.run(ingest(args))
        if args.command == "ingest-runs":
            return asyncio.run(_ingest_runs(args))
        if args.command == "eval":
            return asyncio.run(_eval(args))
        if args.command == "chat":
            from gateway.cli_chat import chat

            return asyncio.run(chat(args, _settings(args)))
        if args.command == "forget":
            from gateway.cli_forget import forget

            return asyncio.run(forget(args, _settings(args, channel_secrets=False)))
        if args.command == "telegram":
            return asyncio.run(_set_webhook(args))
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    except UnknownBot as exc:  # `chat --bot`, `telegram set-webhook --bot`: a typo, not a traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except GatewayError as exc:  # an embedding provider's refusal may quote its key
        from gateway.observability.logs import redact

        print(f"error: {redact(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Terminated:
        return 143
    return 1


def _settings(args, *, channel_secrets: bool = True):
    """The config; with `channel_secrets=False` for a command that sends on no channel (`forget`'s database
    part), which an unset SLACK_BOT_TOKEN (or any channel's secret) refused on a deploy box."""
    from gateway.channel_settings import without_channel_secrets
    from gateway.settings import load_settings

    with without_channel_secrets() if not channel_secrets else contextlib.nullcontext():
        return load_settings(getattr(args, "config", None))


def _holder(settings) -> str:
    """Who holds the index folder, as said after "in use by another process": the server it records (a
    second `make run` learns where the first one answers), else what it may be."""
    url_path = admin_files(settings.qdrant.path)[1]
    url = url_path.read_text().strip() if url_path.exists() else ""  # the server removes it as it stops
    return f": the `gateway serve` at {url}" if url else " (a `gateway chat` or `gateway ingest`, or a `gateway serve`)"


def _serve(args) -> int:
    settings = _settings(args)  # first: a typo is told before qdrant-client and fastembed load (4 s)
    from gateway.observability.logs import configure_logging_for
    from rag.index_lock import folder_in_use

    # The checks and the app's imports take 5-30 s on 2 cores, which `make run` showed as silence.
    configure_logging_for(settings)
    structlog.get_logger().info("gateway.starting", url=local_url(args.host, args.port), role=args.role,
                                config=settings.config_path)
    check_embedding_model(settings, load=args.role != "web")  # a `web` process loads no model
    asyncio.run(require_schema(settings))
    if args.role != "web" and folder_in_use(settings.qdrant):
        # Found at start, the lifespan's IndexBusy was a 60-line traceback ending "Application startup failed".
        raise IndexBusy(f"the Qdrant folder {settings.qdrant.path} is in use by another process{_holder(settings)}. "
                        "Stop it first, or use a Qdrant server (qdrant.url) to run more than one process on one index "
                        "(`--role web` processes hold no index)")
    require_free_port(args.host, args.port)
    import uvicorn  # after the checks: importing the app takes seconds, a config error should not

    from gateway.app import create_app

    app = create_app(settings, role=args.role, url=local_url(args.host, args.port))

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:
            # Before uvicorn's graceful wait: requests waiting for an answer return `pending` now,
            # where the end of that wait would have cut them off with a 500, and no new turn starts.
            app.state.services.begin_stop()
            super().handle_exit(sig, frame)

        @contextlib.contextmanager
        def capture_signals(self):
            # SIGHUP (a closed terminal, or a `kill -HUP` meant as a reload) killed the server outright, with
            # no graceful stop and no word why: it stops as SIGTERM does, and says there is no reload.
            with super().capture_signals():
                previous = signal.signal(signal.SIGHUP, self.hang_up)
                try:
                    yield
                finally:
                    signal.signal(signal.SIGHUP, previous)

        def hang_up(self, sig, frame) -> None:
            structlog.get_logger().warning("gateway.hangup", note="SIGHUP stops the gateway as SIGTERM does: it "
                                           "has no config reload; start it again to read the config")
            self.handle_exit(signal.SIGTERM, frame)

    config = uvicorn.Config(app, host=args.host, port=args.port, log_config=None, access_log=False,
                            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S)
    # uvicorn raises the signal that stopped it again once it has shut down gracefully, with the handler
    # that was there before it started. A stop asked for and done is no failure: SIGTERM (and SIGHUP,
    # which stops as it does) killed the process (-15, make's "*** [run] Terminated", a failed unit to
    # systemd), and Ctrl-C's SIGINT was exit 130 (make's "Error 130"). Both now end with exit 0.
    signal.signal(signal.SIGTERM, lambda sig, frame: None)
    try:
        Server(config).run()
    except KeyboardInterrupt:
        pass
    finally:  # a SIGTERM from here on (a thread that holds the exit up) ends the process, as it would have
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    exit_after_stop(0)
    return 0


def _db_upgrade(args) -> int:
    from alembic import command

    from gateway.database_settings import load_database_settings

    settings = load_database_settings(getattr(args, "config", None))  # it uses database_url alone
    before = asyncio.run(schema_revision(settings))  # unreachable: one line, not Alembic's traceback
    command.upgrade(alembic_config(settings.database_url), "head")
    head, _ = migration_revisions()
    # After an upgrade of the gateway, "is at the latest migration" hid that migrations had just run.
    done = ("was created at the latest migration" if before is None else "is at the latest migration"
            if before == head else f"was upgraded from migration {before} to the latest, {head}")
    print(f"database {done} ({redacted_db_url(settings.database_url)})")
    return 0


async def _ingest_runs(args) -> int:
    from gateway.ingest_history import show_runs
    from gateway.observability.logs import configure_logging_for

    settings = _settings(args)
    configure_logging_for(settings, level="WARNING", fmt="cli")  # its errors redacted as /readyz shows them
    return await show_runs(settings, bot=args.bot, source=args.source, limit=args.limit, as_json=args.json)


async def _eval(args) -> int:
    from pydantic import ValidationError

    from gateway.config_errors import config_error
    from gateway.observability.logs import configure_logging
    from gateway.settings import Settings, load_settings
    from rag.eval import evaluate
    from rag.sources import describe_skipped

    configure_logging(level="WARNING", fmt="cli")
    hide_run_errors_in_logs()  # each file that failed is a `warning:` line below
    for handler in logging.getLogger().handlers:  # and the file types not read, a `note:` (or the error)
        handler.addFilter(lambda record: not getattr(record, SKIPPED_FILES, False))

    # The configured defaults when there is a config to read; a --config or $GATEWAY_CONFIG naming a
    # missing file is an error, as in every other command, not a silent run on built-in defaults.
    explicit = args.config or os.environ.get("GATEWAY_CONFIG")
    try:
        settings = load_settings(args.config) if explicit or Path("config.yaml").exists() else Settings()
    except ValidationError as exc:  # no file: the environment's LOG_LEVEL, DATABASE_URL, … are still read
        raise config_error(exc, Settings) from None
    for warning in uncalibrated_gates(settings, settings.bots[:1]):  # eval searches with the first bot's
        print(f"note: {warning}", file=sys.stderr)
    k_values = tuple(sorted({1, 3, 5, 10, *([args.k] if args.k else [])}))
    documents = 0

    def progress(done: int, total: int, stage: str) -> None:
        nonlocal documents
        if stage == "documents":  # told once per document ingested: none at all means an empty folder
            documents = total
        if bar.callback is not None:
            bar.callback(done, total, stage)

    with progress_bar(as_json=args.json, command="eval", unit="") as bar:
        report = await evaluate(Path(args.docs), Path(args.questions), settings=settings, k_values=k_values,
                                progress=progress)
    for file, error in report.load_errors:  # on stderr, so --json stays one object
        print(f"warning: {file} was not loaded: {error}", file=sys.stderr)
    skipped = f"files of other types were not read: {describe_skipped(report.skipped)}" if report.skipped else ""
    if not documents:
        # Metrics of an empty index are all misses: printed, they would read as a retrieval result.
        print(f"error: no documents were ingested from {args.docs} (Markdown, text, HTML or PDF files); "
              f"there is nothing to evaluate{'; ' + skipped if skipped else ''}", file=sys.stderr)
        return 1
    if skipped:
        print(f"note: {skipped}", file=sys.stderr)
    for line in report.gold_not_found:
        print(f"warning: {line}", file=sys.stderr)
    if args.json:
        print(json.dumps(report.metrics))
        return 0
    print_metrics(report.metrics)
    print_misses(report.outcomes, k=max(k_values))
    return 0


async def _set_webhook(args) -> int:
    from channels.telegram_bot import set_webhook, webhook_url

    settings = _settings(args)
    bot = settings.bot(args.bot)
    if bot.channels.telegram is None:
        # It said only that: which file to edit, and with which keys, were left to find.
        print(f"error: bot {bot.name!r} has no telegram channel: add `channels.telegram` to it in "
              f"{settings.config_path or 'the config file'}, as `telegram: {{token: \"${{TELEGRAM_BOT_TOKEN}}\", "
              "webhook_secret: \"${TELEGRAM_WEBHOOK_SECRET}\"}` under the bot's `channels:` (the secrets from the "
              "environment; docs/channels/telegram.md), then run this again", file=sys.stderr)
        return 2
    channel, where = bot.channels.telegram, settings.config_path or "the config file"
    refused = ("is off (`enabled: false`) in {}, so the gateway would refuse every update sent to the webhook: turn "
               "it on first" if not channel.enabled else "is in `mode: polling` in {}, which fetches the updates itself "
               "(a webhook would stop it): set `mode: webhook`, with a `webhook_secret`, to receive them on a webhook"
               if channel.mode == "polling" else "")
    if refused:  # registered, the webhook got no answer, or Telegram refused the running server's polling (409)
        print(f"error: the telegram channel of bot {bot.name!r} {refused.format(where)}", file=sys.stderr)
        return 2
    try:
        url = webhook_url(args.url, bot.name)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    await set_webhook(channel, url)
    print(f"webhook set: {url}")
    return 0
