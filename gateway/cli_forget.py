"""`gateway forget`: a contact's data erased on request (gateway/retention.py), and what it prints."""

from __future__ import annotations

import json
import os
import sys

from gateway.preflight import require_schema


async def forget(args, settings) -> int:
    """`gateway forget`: erase a contact, then the gateway's posts about them in Slack; prints the counts."""
    from gateway.observability.logs import configure_logging_for
    from gateway.operators.slack_purged import erase_forgotten_threads
    from gateway.retention import forget_contact
    from storage.engine import create_engine, session_factory

    configure_logging_for(settings)  # logs to stderr, counts to stdout
    engine = create_engine(settings.database_url)
    try:
        await require_schema(settings, engine)
        sessions = session_factory(engine)
        report = await forget_contact(sessions, channel=args.channel, user=args.user,
                                      actor=f"cli:{os.environ.get('USER', 'unknown')}")
        # What the gateway posted about them; stored with the forget, so what this leaves the retention job retries.
        left = await erase_forgotten_threads(sessions, settings, report.operator_threads)
    finally:
        await engine.dispose()
    counts = {k: getattr(report, k) for k in ("contacts", "conversations", "messages", "escalations")}
    if args.json:
        print(json.dumps(counts))
    else:
        print(f"deleted {_forgotten(counts, opt_outs_kept=report.opt_outs_kept)} (recorded in data_deletions)")
        if erased := len(set(report.operator_threads)) - len(left):
            print(f"deleted {erased} Slack operator thread{'s' if erased != 1 else ''} (the operators' own replies stay)")
    if not any(report.as_dict().values()):  # nothing at all matched (a removed chat's mark is a match): a typo
        hint = " (for the web chat, the user id is the session_id)" if args.channel == "web" else ""
        print(f"note: no {args.channel} contact has the user id {args.user!r}, so nothing was deleted{hint}",
              file=sys.stderr)
    for thread, outcome in left:
        print(f"warning: Slack operator thread {thread.ts} (bot {thread.bot}, channel {thread.channel or 'unknown'}) "
              f"was not deleted: {outcome.why}; {_then(outcome)}", file=sys.stderr)
    # Not done yet: the person's words are still in Slack, which a script carrying out erasure requests must see.
    return 1 if left else 0


def _then(left) -> str:
    """What becomes of a thread forget left (`slack_purged.Left`), as it is: the retention job's attempts left (this
    was the first, unless a run tried it at once), none, or none since another attempt dropped it meanwhile."""
    if left.dropped:
        return ("another attempt at it (the retention job's, or another forget's) ended meanwhile, having deleted it "
                "or given it up, so nothing tries it again: delete it in Slack if it is still there")
    if left.retries == 0:
        return "delete it in Slack"
    times = f", up to {left.retries} time{'s' if left.retries != 1 else ''}" if left.retries else ""
    return f"the retention job tries it again on its next runs (gateway serve, retention_schedule){times}; else delete it in Slack"


def _forgotten(counts: dict[str, int], *, opt_outs_kept: int) -> str:
    """`1 contact, 2 conversations, …` ("1 contacts" read as a slip), and the opt-outs kept in their place,
    which "0 contacts" alone hid."""
    said = ", ".join(f"{n} {name if n != 1 else name.removesuffix('s')}" for name, n in counts.items())
    if opt_outs_kept:
        said += f"; kept {opt_outs_kept} opt-out{'s' if opt_outs_kept != 1 else ''} (WhatsApp STOP)"
    return said
