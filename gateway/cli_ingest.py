"""The `gateway ingest` command: here when the index folder is free, else through the running server
that holds it, each saying what became of a run that Ctrl-C cut short."""

from __future__ import annotations

import sys

from gateway.admin_client import ingest_via_server
from gateway.cli_output import (
    INGEST_INTERRUPTED,
    hide_run_errors_in_logs,
    print_reports,
    progress_bar,
    told_if_interrupted,
)
from gateway.errors import IndexBusy
from gateway.preflight import require_schema


async def ingest(args) -> int:
    """Run `gateway ingest` with its parsed arguments; returns the exit code."""
    from gateway.knowledge import Knowledge
    from gateway.observability.logs import configure_logging_for
    from gateway.settings import load_settings
    from rag.index_lock import folder_in_use
    from storage.engine import create_engine, session_factory

    settings = load_settings(args.config)
    configure_logging_for(settings, level="WARNING", fmt="cli")  # `warning: …`, as through a server (admin_client)
    if not args.json:  # the report below prints these as its `!` lines
        hide_run_errors_in_logs()
    engine = create_engine(settings.database_url)
    knowledge = Knowledge(settings, sessions=session_factory(engine))
    try:
        try:  # before the models load and the index opens: a typo is answered at once
            knowledge.ingest_targets(bot=args.bot, source=args.source)
        except KeyError as exc:
            print(f"error: unknown {exc.args[0]}", file=sys.stderr)
            return 2
        if not settings.bots:  # an empty file, or the wrong one: said as chat says it, not "no source … for it"
            print(f"nothing to ingest: no bots configured in {settings.config_path or 'the config file'}: add one "
                  "under `bots:` (README.md, Configuration)", file=sys.stderr)
            return 0
        await require_schema(settings, engine)
        if folder_in_use(settings.qdrant):  # before the models load (seconds): the server does the work
            return await ingest_via_server(settings, bot=args.bot, source=args.source, as_json=args.json)
        try:
            await knowledge.open()
        except IndexBusy:
            return await ingest_via_server(settings, bot=args.bot, source=args.source, as_json=args.json)
        with told_if_interrupted(INGEST_INTERRUPTED), progress_bar(as_json=args.json) as bar:
            reports = await knowledge.ingest(bot=args.bot, source=args.source, trigger="cli", progress=bar.callback)
    finally:
        await knowledge.close()
        await engine.dispose()
    return print_reports([r.as_dict() for r in reports], as_json=args.json)
