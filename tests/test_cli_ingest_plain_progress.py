"""`gateway ingest` without a terminal (CI, a log file, a service manager) still says it is alive:
a plain progress line on stderr every few seconds, where a terminal gets the bar."""

from __future__ import annotations

import re

from gateway import cli_output
from gateway.cli import main
from tests.conftest import write_config


def _three_documents(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("refunds", "plans", "sync"):
        (docs / f"{name}.md").write_text(f"# {name.title()}\n\nThe {name} page says what {name} are and how they work.\n")
    config = write_config(tmp_path, bots=[{"name": "acme", "channels": {"web": {}}, "sources": [
        {"name": "docs", "type": "directory", "path": str(docs)}]}])
    assert main(["db", "upgrade", "--config", str(config)]) == 0
    return config


def test_an_ingest_whose_stderr_is_no_terminal_prints_plain_progress_lines(tmp_path, capsys, monkeypatch):
    """It printed nothing until the end: a 15 MB manual ingested in CI or under a service manager looked hung."""
    config = _three_documents(tmp_path)
    capsys.readouterr()
    monkeypatch.setattr(cli_output, "PLAIN_PROGRESS_EVERY_S", 0.0)  # a line at every move, not every 10 s
    assert main(["ingest", "--config", str(config)]) == 0
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.startswith("ingest: ")]
    assert lines, captured.err
    assert all(re.fullmatch(r"ingest: acme/docs [\d.]+/3 documents \(\d+%\), \d+ s", line) for line in lines), lines
    assert lines[0].startswith("ingest: acme/docs 0/3 documents (0%)")
    assert lines[-1].startswith("ingest: acme/docs 3/3 documents (100%)")
    assert "\x1b" not in captured.err  # no bar's escape codes in a log file
    assert "ingest: " not in captured.out  # stdout keeps the results alone
    assert "acme/docs: 3 new documents" in captured.out


def test_plain_progress_says_nothing_within_its_interval_and_a_run_still_moving_is_told(monkeypatch):
    """A run shorter than the interval prints no line (a cron job's output stays its report); after it, the
    state as it is, also when nothing moved (the ticker thread's call: chunking one large file)."""
    import io

    err = io.StringIO()
    monkeypatch.setattr(cli_output.sys, "stderr", err)
    clock = iter([0.0, 1.0, 2.0, 12.5, 13.0, 23.0])
    plain = cli_output.PlainProgress(every_s=10.0, clock=lambda: next(clock))  # started at 0
    plain.update(0, 4, "acme/docs")  # t=1
    plain.update(1.5, 4, "acme/docs")  # t=2
    plain.tick()  # t=12.5: nothing moved since t=2, and it is said
    plain.update(2, 4, "acme/docs")  # t=13: within 10 s of the last line
    plain.tick()  # t=23
    assert err.getvalue().splitlines() == ["ingest: acme/docs 1.5/4 documents (38%), 12 s",
                                           "ingest: acme/docs 2/4 documents (50%), 23 s"]


def test_a_plain_progress_line_is_one_write_so_no_other_threads_output_splits_it(monkeypatch):
    """The ticker thread printed the line and its newline as two writes (print's), between which the ingest's own
    stderr output (a log line, a warning) could land: 'ingest: … 12 s{log line}' and an empty line after it."""
    class Writes:
        def __init__(self) -> None:
            self.calls: list[str] = []

        def write(self, text: str) -> int:
            self.calls.append(text)
            return len(text)

        def flush(self) -> None:
            pass

    err = Writes()
    monkeypatch.setattr(cli_output.sys, "stderr", err)
    clock = iter([0.0, 11.0])
    plain = cli_output.PlainProgress(every_s=10.0, clock=lambda: next(clock))
    plain.update(1, 4, "acme/docs")
    assert err.calls == ["ingest: acme/docs 1/4 documents (25%), 11 s\n"]


def test_a_plain_progress_line_writes_a_count_of_millions_as_digits(monkeypatch):
    """`{done:g}` wrote 1,500,000 pages fetched as '1.5e+06' (six significant digits, then an exponent)."""
    import io

    err = io.StringIO()
    monkeypatch.setattr(cli_output.sys, "stderr", err)
    clock = iter([0.0, 11.0, 22.0])
    plain = cli_output.PlainProgress(every_s=10.0, clock=lambda: next(clock))
    plain.update(1_500_000, 2_000_000, "acme/site pages fetched")
    plain.update(1_234_567.125, 2_000_000, "acme/docs")
    assert err.getvalue().splitlines() == ["ingest: acme/site pages fetched 1500000/2000000 (75%), 11 s",
                                           "ingest: acme/docs 1234567.125/2000000 documents (62%), 22 s"]
