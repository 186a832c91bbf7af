"""`gateway ingest-runs`: the recorded ingest runs, newest first, without writing SQL.

Every run is recorded (`ingest_runs`); /readyz shows only each source's last one and the one going, so a maintainer
asking "when did this page start failing?" or "did last night's run finish?" had to query the
database by hand. This reads the store alone (no index, no models), so it works beside a running
server too.
"""

from __future__ import annotations

import json
import sys

from gateway.models import as_utc
from gateway.observability.logs import one_terminal_line, redact
from gateway.preflight import require_schema
from rag.ingest_runs import errors_not_kept, recent_runs
from storage.engine import create_engine, session_factory
from storage.models import IngestRun

ERRORS_SHOWN = 3  # a run of a site that was down has one error a page; the count says how many more


async def show_runs(settings, *, bot: str | None, source: str | None, limit: int, as_json: bool) -> int:
    """Print the runs (one object with `--json`); exit 0, also when there are none (said on stderr)."""
    engine = create_engine(settings.database_url)
    try:
        await require_schema(settings, engine)
        runs = await recent_runs(session_factory(engine), bot=bot, source=source, limit=limit)
    finally:
        await engine.dispose()
    if as_json:
        print(json.dumps({"runs": [run_dict(run) for run in runs]}))
    elif not runs:
        which = " of ".join(f"{kind} {name!r}" for kind, name in (("source", source), ("bot", bot)) if name)
        names = [b.name for b in settings.bots]
        unknown = f" (the config's bots: {', '.join(names) or 'none'})" if bot and bot not in names else ""
        print(f"no ingest runs recorded{' for ' + which if which else ''}{unknown}", file=sys.stderr)
    else:
        width = max(len(f"{run.bot}/{run.source}") for run in runs)  # one column, however long the names
        for run in runs:
            print_run(run, width=width)
    return 0


def run_dict(run: IngestRun) -> dict[str, object]:
    took = None if run.duration_s is None else round(run.duration_s, 3)  # as `ingest --json` gives it
    return {"id": run.id, "bot": run.bot, "source": run.source, "trigger": run.trigger, "status": run.status,
            "started_at": as_utc(run.started_at).isoformat(), "duration_s": took,
            "added": run.added, "updated": run.updated, "deleted": run.deleted, "unchanged": run.unchanged,
            "errors": [redact(error) for error in run.errors],  # as /readyz and the log show them
            "errors_dropped": run.errors_dropped}


def print_run(run: IngestRun, *, width: int = 0) -> None:
    started = as_utc(run.started_at).strftime("%Y-%m-%d %H:%M:%S")
    took = f"{run.duration_s:.1f}s" if run.duration_s is not None else "-"
    counts = (f"{run.added} added, {run.updated} updated, {run.deleted} deleted, {run.unchanged} unchanged"
              if run.status not in ("running", "interrupted", "skipped") else "")
    print(f"{started}  {f'{run.bot}/{run.source}':<{width}}  {run.trigger:<8}  {run.status:<11}  {took:>7}  {counts}".rstrip())
    for error in run.errors[:ERRORS_SHOWN]:
        print(f"    ! {one_terminal_line(redact(error))}")  # it may quote a URL a sitemap listed
    if len(run.errors) > ERRORS_SHOWN:
        print(f"    … and {len(run.errors) - ERRORS_SHOWN} more error(s) (--json lists them)")
    if run.errors_dropped:
        print(f"    {errors_not_kept(run.errors_dropped)}")
