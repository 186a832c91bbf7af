"""How `gateway ingest` and `gateway eval` show their work in a terminal.

Results go to stdout (one JSON object with `--json`) and everything else to stderr: the progress
bar, per-source errors, so the results can be piped while a person still sees what is going on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from gateway.errors import IN_RUN_ERRORS
from gateway.observability.logs import one_terminal_line, redact
from rag.ingest_runs import errors_not_kept

EVAL_MISSES_SHOWN = 20
INGEST_INTERRUPTED = ("a run cut short is recorded as failed (`gateway ingest-runs` shows it); run `gateway ingest` "
                      "again to finish it")


class Terminated(Exception):
    """SIGTERM stopped the command (`main` exits 143, 128 + SIGTERM, as a process the signal killed)."""


@contextmanager
def told_if_interrupted(what_now: str) -> Iterator[None]:
    """Ctrl-C (asyncio.run cancels the task) ended `ingest` with exit 130 and no word on its runs. SIGTERM
    (`timeout`, a supervisor) is made to cancel the task too, raising `Terminated`: it killed the process on
    the spot, and the run it cut short stayed `running` until another gateway process marked it interrupted."""
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    terminated = False

    def terminate() -> None:
        nonlocal terminated
        if not terminated:  # a second SIGTERM must not cut short the recording of the run
            terminated = True
            task.cancel()

    # Only the main thread takes signals (an ingest in a thread of its own, as the web tests run it, raised).
    handled = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM)
    if handled:
        loop.add_signal_handler(signal.SIGTERM, terminate)
    try:
        yield
    except (asyncio.CancelledError, KeyboardInterrupt):
        print(f"interrupted: {what_now}", file=sys.stderr)
        if terminated and task.uncancel() == 0:
            raise Terminated from None
        raise
    finally:
        if handled:
            loop.remove_signal_handler(signal.SIGTERM)  # which sets SIGTERM's default, not what was there before:
            if previous is not None:  # a program calling `main` in-process keeps its own (None: not set from Python)
                signal.signal(signal.SIGTERM, previous)


def print_reports(runs: list[dict], *, as_json: bool) -> int:
    runs = [{**run, "errors": [redact(error) for error in run.get("errors", [])]} for run in runs]  # as /readyz shows them
    totals = {k: sum(r[k] for r in runs) for k in ("added", "updated", "deleted", "unchanged")}
    if as_json:
        print(json.dumps({**totals, "runs": runs}))
    elif not runs:
        print("nothing to ingest: no source is configured for it (a bot's `sources:` in the config)", file=sys.stderr)
    else:
        for run in runs:
            if run["status"] == "removed":
                chunks, documents = run["deleted"], run.get("documents_removed")  # none from an older server
                deleted = f"{chunks} chunk{'s' if chunks != 1 else ''}"
                if documents:
                    deleted = f"{documents} document{'s' if documents != 1 else ''} ({deleted})"
                were = "was" if (documents or chunks) == 1 else "were"
                print(f"{run['bot']}/{run['source']}: no longer in the config; its {deleted} {were} deleted")
                continue
            dropped = run.get("errors_dropped", 0)  # a server of an older version sends none
            errors = f", {len(run['errors']) + dropped} error(s)" if run["errors"] else ""
            kept = ""
            if run["status"] == "failed":
                total = run.get("total")
                kept = "; failed" if not total else "; failed, its 1 chunk kept as it was" if total == 1 else \
                    f"; failed, its {total} chunks kept as they were"
            chunks = f"{run['added']} added, {run['updated']} updated, {run['deleted']} deleted, {run['unchanged']} unchanged"
            chunks = f"{documents} (chunks: {chunks})" if (documents := _documents(run)) else f"{chunks} chunks"
            print(f"{run['bot']}/{run['source']}: {chunks} in {run['duration_s']:.1f}s{errors}{kept}")
            for err in run["errors"]:
                print(f"  ! {one_terminal_line(err)}", file=sys.stderr)  # it may quote a URL a sitemap listed
            if dropped:
                print(f"  {errors_not_kept(dropped)}", file=sys.stderr)
    # A partial run had errors too (a page that failed, a folder that came back empty): a cron job
    # or a deploy script must see it, not only a reader of the `!` lines.
    return 1 if any(r["status"] in ("failed", "partial") for r in runs) else 0


def _documents(run: dict) -> str:
    """"1 new document, 2 changed, 3 re-embedded, 1 removed" (or "no document changed"): an edited document is
    chunks `updated` and the old ones they replace `deleted`, which read as two changes; a re-embedded one has
    its content as it was (another model or chunking, chunks the index lost). "" from a server of an older
    version, which does not count documents, and for a failed run, which stored none."""
    counts = [run.get(f"documents_{k}") for k in ("new", "changed", "removed")]
    if None in counts or run["status"] == "failed":
        return ""
    counts.insert(2, run.get("documents_reembedded", 0))  # a server of an older version counts them as changed
    parts = [[n, word] for n, word in zip(counts, ("new", "changed", "re-embedded", "removed")) if n]
    if not parts:
        return "no document changed"
    noun = "document" if parts[0][0] == 1 else "documents"  # on the first part only: "1 new document, 2 changed"
    parts[0][1] = f"new {noun}" if parts[0][1] == "new" else f"{noun} {parts[0][1]}"
    return ", ".join(f"{n} {word}" for n, word in parts)


def hide_run_errors_in_logs() -> None:
    """Let no log handler show the errors that the command prints itself."""
    for handler in logging.getLogger().handlers:
        handler.addFilter(hide_run_errors())


class hide_run_errors(logging.Filter):
    """Drops the log records of errors that `print_reports` prints anyway, as its `!` lines, so a
    failed file is not shown twice; other warnings (a capped crawl delay, say) still show."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(record, IN_RUN_ERRORS, False)


PLAIN_PROGRESS_EVERY_S = 10.0
"""Without a terminal, a plain progress line at most this often (none for a run shorter than it)."""


class progress_bar:
    """Progress on stderr, fed by a (done, total, label) callback: a rich bar when stderr is a terminal; a
    plain line every `PLAIN_PROGRESS_EVERY_S` when it is not (CI, a log file, a service manager), where an
    ingest of one large file printed nothing for minutes. `callback` is None with `--json` at a terminal
    (stdout carries the results, and may be a pipe)."""

    def __init__(self, *, as_json: bool, command: str = "ingest", unit: str = "documents") -> None:
        self._progress = None
        self._tasks: dict[str, int] = {}
        self._plain: PlainProgress | None = None
        self.callback = None
        if not sys.stderr.isatty():
            self._plain = PlainProgress(every_s=PLAIN_PROGRESS_EVERY_S, command=command, unit=unit)
            self.callback = self._plain.update
        elif not as_json:
            self.callback = self._update

    def __enter__(self):
        if self._plain is not None:
            self._plain.start()
        elif self.callback is not None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), transient=False, console=Console(stderr=True))
            self._progress.__enter__()
        return self

    def _update(self, done: int, total: int, label: str = "ingest") -> None:
        if label not in self._tasks:
            self._tasks[label] = self._progress.add_task(label, total=total)
        self._progress.update(self._tasks[label], completed=done, total=total)

    def __exit__(self, *exc):
        if self._plain is not None:
            self._plain.stop()
        return self._progress.__exit__(*exc) if self._progress is not None else None


class PlainProgress:
    """Progress as plain lines on stderr, `ingest: acme/docs 1.5/4 documents (38%), 12 s` (seconds since it
    started; a crawl's `acme/site pages fetched 3/40 (8%)`, eval's `eval: questions 5/119 (4%)`): at most one
    every `every_s`, none before `every_s` has passed, and from a ticker thread also when nothing moved (one
    large file being chunked, a batch being embedded), so a long run always shows it is alive. Nothing is said
    before the first move (the document count is not known yet)."""

    def __init__(self, *, every_s: float, command: str = "ingest", unit: str = "documents",
                 clock=time.monotonic) -> None:
        self.every_s, self._clock, self.command, self.unit = every_s, clock, command, unit
        self._started = self._said = clock()
        self._state: tuple[float, int, str] | None = None
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._ticker: threading.Thread | None = None

    def start(self) -> None:
        self._ticker = threading.Thread(target=self._tick_until_stopped, name="ingest-progress", daemon=True)
        self._ticker.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._ticker is not None:
            self._ticker.join()

    def update(self, done: float, total: int, label: str = "ingest") -> None:
        with self._lock:
            self._state = (done, total, label)
        self.tick()

    def tick(self) -> None:
        """Say the state if `every_s` has passed since the last line (or the start)."""
        with self._lock:
            now = self._clock()
            if self._state is None or now - self._said < self.every_s:
                return
            self._said = now
            done, total, label = self._state
            share = f" ({round(100 * done / total)}%)" if total else ""
            unit = f" {self.unit}" if self.unit and not label.endswith(" pages fetched") else ""
            # One write, the newline in it: print() writes them apart, and the main thread's stderr (a log
            # line, a warning) could land between them.
            said = f"{done:.3f}".rstrip("0").rstrip(".")  # digits: {:g} wrote a million as 1e+06
            sys.stderr.write(f"{self.command}: {label} {said}/{total}{unit}{share}, {int(now - self._started)} s\n")
            sys.stderr.flush()

    def _tick_until_stopped(self) -> None:
        while not self._stopped.wait(max(self.every_s, 0.5)):
            self.tick()


def print_metrics(metrics: dict) -> None:
    """`eval`'s metrics, one a line. A rate over no questions is 0.0 in the JSON (a number, as DESIGN.md's
    keys are) but n/a here, where 0.000 would read as a gate that refuses nothing or a search that
    finds nothing."""
    undefined: set[str] = set()
    if not metrics["n_unanswerable"]:
        undefined.add("refusal_rate")
    if not metrics["n_answerable"]:
        undefined |= {k for k in metrics if k.startswith("recall@")} | {"mrr", "false_refusal_rate"}
    for key, value in metrics.items():
        if key in undefined:
            print(f"{key:>20}: n/a (no {'unanswerable' if key == 'refusal_rate' else 'answerable'} questions)")
        else:
            print(f"{key:>20}: {value:.3f}" if isinstance(value, float) else f"{key:>20}: {value}")


def print_misses(outcomes, *, k: int, limit: int = EVAL_MISSES_SHOWN) -> None:
    """The questions to look at, with what the search saw (gate 1's inputs and its first chunk)."""
    misses = [o for o in outcomes if o.wrong]
    if not misses:
        return
    print(f"\n{len(misses)} question(s) to look at" + (f" (first {limit})" if len(misses) > limit else "") + ":")
    for o in misses[:limit]:
        if not o.question.answerable:
            verdict = "unanswerable, not refused"
        elif not o.gold_in_documents:  # refused or not: the label is what to fix first
            verdict = "no document holds its gold text (a label to fix)"
        elif o.refused:
            verdict = "refused by gate 1" + (f" (gold at rank {o.rank})" if o.rank else "")
        else:
            verdict = f"no gold text in the top {k}"
        dense = f"{o.best_dense_score:.2f}" if o.best_dense_score is not None else "-"
        coverage = f"{o.lexical_coverage:.2f}" if o.lexical_coverage is not None else "-"
        title = o.top_title or "-"
        title = title if len(title) <= 60 else title[:59] + "…"  # some titles are a whole first paragraph
        print(f"- {o.question.question!r}: {verdict}; best dense {dense}, coverage {coverage}, first chunk from {title!r}")
