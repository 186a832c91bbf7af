"""`gateway ingest-runs`: the history of ingest runs that /readyz (the last run only) does not show."""

from __future__ import annotations

import asyncio
import json

from gateway.cli import main
from gateway.cli_output import print_reports
from gateway.settings import load_settings
from rag.ingest_runs import IngestReport, record_run, start_run
from storage.engine import create_engine, session_factory
from tests.conftest import upgrade, write_config


def _recorded(config, record) -> None:
    """The config's database migrated, then `record(sessions)` run on it: the runs a test lists."""
    settings = load_settings(config)
    upgrade(settings.database_url)

    async def run() -> None:
        engine = create_engine(settings.database_url)
        try:
            await record(session_factory(engine))
        finally:
            await engine.dispose()

    asyncio.run(run())


def _record_history(tmp_path):
    """Three finished runs of two sources and one still running; returns the config path."""
    config = write_config(tmp_path)

    async def record(sessions) -> None:
        run = await start_run(sessions, "acme", "docs", trigger="cli")
        await record_run(sessions, IngestReport("acme", "docs", added=4, duration_s=1.25), trigger="cli", run_id=run)
        errors = [f"https://example.com/p{i}: answered 404 Not Found" for i in range(5)]
        errors[0] = "https://bot:s3cret@example.com/p0: answered 404 Not Found"  # a source URL's password
        # A URL a sitemap listed, as its site's owner wrote it: a C1 CSI (XML allows it) and a line of its own.
        errors[1] = "https://example.com/p1\x9b2J\n    ! all pages read: answered 404 Not Found"
        run = await start_run(sessions, "acme", "site", trigger="schedule")
        await record_run(sessions, IngestReport("acme", "site", unchanged=9, errors=errors, status="partial"),
                         trigger="schedule", run_id=run)
        run = await start_run(sessions, "acme", "docs", trigger="schedule")
        await record_run(sessions, IngestReport("acme", "docs", unchanged=4), trigger="schedule", run_id=run)
        await start_run(sessions, "acme", "site", trigger="schedule")

    _recorded(config, record)
    return config


def test_ingest_runs_lists_the_history_newest_first_with_errors(tmp_path, capsys):
    config = _record_history(tmp_path)
    assert main(["ingest-runs", "--config", str(config)]) == 0
    lines = capsys.readouterr().out.splitlines()
    runs = [line for line in lines if not line.startswith("    ")]
    assert [line.split()[2:5] for line in runs] == [
        ["acme/site", "schedule", "running"], ["acme/docs", "schedule", "ok"],
        ["acme/site", "schedule", "partial"], ["acme/docs", "cli", "ok"]]
    assert runs[3].endswith("1.2s  4 added, 0 updated, 0 deleted, 0 unchanged")
    assert "    ! https://bot:[REDACTED]@example.com/p0: answered 404 Not Found" in lines  # as /readyz shows it
    assert "    … and 2 more error(s) (--json lists them)" in lines
    # Shown on one line, obeyed by no terminal.
    assert "    ! https://example.com/p1\\x9b2J\\n    ! all pages read: answered 404 Not Found" in lines
    assert "    ! all pages read: answered 404 Not Found" not in lines and not any("\x9b" in line for line in lines)


def test_ingest_runs_filters_by_source_and_limit_and_prints_json(tmp_path, capsys):
    config = _record_history(tmp_path)
    assert main(["ingest-runs", "--config", str(config), "--source", "site", "--limit", "1", "--json"]) == 0
    [run] = json.loads(capsys.readouterr().out)["runs"]
    assert (run["source"], run["status"], run["duration_s"]) == ("site", "running", None)
    assert main(["ingest-runs", "--config", str(config), "--bot", "other"]) == 0
    # A typo in --bot read as a bot never ingested: a name the config does not have is said to be one.
    assert capsys.readouterr().err == "no ingest runs recorded for bot 'other' (the config's bots: acme)\n"
    assert main(["ingest-runs", "--config", str(config), "--bot", "acme", "--source", "nope"]) == 0
    assert capsys.readouterr().err == "no ingest runs recorded for source 'nope' of bot 'acme'\n"


def test_a_run_with_more_errors_than_it_keeps_says_how_many_it_dropped(tmp_path, capsys):
    """Only the first 100 errors were kept, without a word: 100 errors read as all of them."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "plans.md").write_text("# Plans\n\nThe Plus plan costs $12 per month and includes 50 GB of storage.\n")
    for i in range(103):  # a page the folder names but cannot read: each is one error of the run
        (docs / f"moved-{i:03}.md").symlink_to(tmp_path / "elsewhere" / f"{i}.md")
    bot = {"name": "acme", "sources": [{"name": "docs", "type": "directory", "path": str(docs), "schedule": "0 3 * * *"}]}
    config = str(write_config(tmp_path, bots=[bot]))
    upgrade(load_settings(config).database_url)
    assert main(["ingest", "--config", config, "--json"]) == 1  # partial
    [run] = json.loads(capsys.readouterr().out)["runs"]
    assert (len(run["errors"]), run["errors_dropped"]) == (100, 3)
    assert run["errors"][-1].startswith("moved-102.md: broken symlink")  # the last one is kept: a failed run's cause
    assert main(["ingest-runs", "--config", config]) == 0
    assert "    … and 3 more error(s) not kept (a run keeps 100)" in capsys.readouterr().out.splitlines()
    assert main(["ingest-runs", "--config", config, "--json"]) == 0
    [stored] = json.loads(capsys.readouterr().out)["runs"]
    assert (len(stored["errors"]), stored["errors_dropped"]) == (100, 3)
    # `ingest --json` gave 0.033 and `ingest-runs --json` the same run's 0.033374979999607604
    assert stored["duration_s"] == run["duration_s"], (stored["duration_s"], run["duration_s"])
    assert main(["ingest", "--config", config]) == 1  # its report says it in the same words
    assert "  … and 3 more error(s) not kept (a run keeps 100)" in capsys.readouterr().err.splitlines()


def test_cli_ingest_shows_each_error_on_one_line_the_terminal_obeys_none_of(capsys):
    # An error quotes a URL a sitemap listed (its site's owner wrote it): an escape sequence in it reached the
    # terminal as a command, and a newline in it printed a line of the owner's choosing.
    run = {"bot": "acme", "source": "site", "status": "partial", "added": 1, "updated": 0, "deleted": 0, "unchanged": 0,
           "duration_s": 0.1, "errors": ["https://x.example/\x1b]0;pwned\x07\n  ! everything fine: answered 404"]}
    assert print_reports([run], as_json=False) == 1
    err = capsys.readouterr().err
    assert "  ! https://x.example/\\x1b]0;pwned\\x07\\n  ! everything fine: answered 404\n" in err and "\x1b" not in err


def test_ingest_runs_keeps_its_columns_aligned_across_source_names(tmp_path, capsys):
    """`acme/warehouse  cli       failed` over `acme/help-center  cli       ok`: each column after the
    bot/source started where that name's length put it, so the statuses did not line up."""
    config = write_config(tmp_path)

    async def record(sessions) -> None:
        for source in ("kb", "help-center"):
            run = await start_run(sessions, "acme", source, trigger="cli")
            await record_run(sessions, IngestReport("acme", source, added=1, duration_s=0.5), trigger="cli", run_id=run)

    _recorded(config, record)
    assert main(["ingest-runs", "--config", str(config)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and len({line.index(" cli ") for line in lines}) == 1, lines


def test_ingest_runs_redacts_a_source_urls_credential_as_readyz_does(tmp_path, capsys, monkeypatch):
    """A page of a private wiki that failed is recorded by its URL, `?access_token=` and all: /readyz and the
    log redact it, while `gateway ingest-runs`, which configured no redaction, printed it whole."""
    from gateway.observability.logs import configure_logging

    configure_logging(level="WARNING")  # no secrets known, as in a fresh `gateway ingest-runs`
    monkeypatch.setenv("WIKI_TOKEN", "wiki-token-4f9a2c")
    wiki = "https://wiki.example.com/export?page=refunds&access_token=${WIKI_TOKEN}"
    config = write_config(tmp_path, bots=[{"name": "acme", "channels": {"web": {}}, "sources": [
        {"name": "wiki", "type": "urls", "urls": [wiki]}]}])
    error = "https://wiki.example.com/export?page=refunds&access_token=wiki-token-4f9a2c: answered 503"

    async def record(sessions) -> None:
        run = await start_run(sessions, "acme", "wiki", trigger="schedule")
        await record_run(sessions, IngestReport("acme", "wiki", errors=[error], status="failed"),
                         trigger="schedule", run_id=run)

    _recorded(config, record)
    assert main(["ingest-runs", "--config", str(config)]) == 0
    assert main(["ingest-runs", "--config", str(config), "--json"]) == 0
    # And `gateway ingest`'s own report of the run, printed once the command has read the config.
    report = IngestReport("acme", "wiki", errors=[error], status="failed").as_dict()
    assert print_reports([report], as_json=False) == print_reports([report], as_json=True) == 1
    out, err = capsys.readouterr()
    assert "wiki-token-4f9a2c" not in out + err
    assert "    ! https://wiki.example.com/export?page=refunds&access_token=[REDACTED]: answered 503" in out
    assert "  ! https://wiki.example.com/export?page=refunds&access_token=[REDACTED]: answered 503" in err
