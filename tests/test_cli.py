"""The command line as a user runs it: ingest (also while a server holds the index), eval, db upgrade."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time

import httpx
import pytest
import uvicorn

from gateway.admin_client import admin_files
from gateway.app import create_app
from gateway.cli import local_url
from gateway.settings import load_settings
from tests.conftest import ROOT, write_config
from tests.scale.replicas import free_port

PLANS = """# Plans

## Plus plan

The Plus plan costs $12 per month and includes 50 GB of storage.

## Team plan

The Team plan costs $20 per user per month.
"""
SYNC = """# Sync errors

## E-SYNC-409

Error E-SYNC-409 means two devices edited the same note at once; a conflicted copy is kept.
"""


def _run(*args: str, env: dict | None = None, timeout: float = 300, input: str | None = None,
         ) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True", **(env or {})}
    return subprocess.run([sys.executable, "-m", "gateway", *args], cwd=ROOT, env=full_env, capture_output=True,
                          text=True, timeout=timeout, input=input)


@pytest.fixture
def kb_config(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "plans.md").write_text(PLANS)
    (docs / "sync.md").write_text(SYNC)
    bot = {"name": "acme", "sources": [{"name": "docs", "type": "directory", "path": str(docs),
                                        "schedule": "0 3 * * *"}], "channels": {"web": {}}}
    config = write_config(tmp_path, bots=[bot])
    assert _run("db", "upgrade", "--config", str(config)).returncode == 0
    return config, docs


def test_cli_ingest_json_counts_then_unchanged_then_deleted(kb_config):
    config, docs = kb_config
    first = _run("ingest", "--config", str(config), "--json")
    assert first.returncode == 0, first.stderr
    counts = json.loads(first.stdout)
    assert counts["added"] >= 2 and counts["updated"] == counts["deleted"] == counts["unchanged"] == 0
    second = json.loads(_run("ingest", "--config", str(config), "--json").stdout)
    assert second["added"] == 0 and second["unchanged"] == counts["added"]
    (docs / "sync.md").unlink()
    third = json.loads(_run("ingest", "--config", str(config), "--json").stdout)
    assert third["deleted"] >= 1 and third["unchanged"] >= 1


def test_cli_ingest_of_a_missing_folder_says_its_chunks_are_kept(kb_config):
    """A failed run's counts are all 0, which read as an emptied source (review): `total` says what it holds."""
    config, docs = kb_config
    first = json.loads(_run("ingest", "--config", str(config), "--json").stdout)
    assert first["runs"][0]["total"] == first["added"] > 0
    docs.rename(docs.with_name("docs-unmounted"))
    failed = _run("ingest", "--config", str(config), "--json")
    assert failed.returncode == 1
    [run] = json.loads(failed.stdout)["runs"]
    assert run["status"] == "failed" and run["unchanged"] == 0 and run["total"] == first["added"]
    text = _run("ingest", "--config", str(config))
    assert f"failed, its {first['added']} chunks kept as they were" in text.stdout


def test_cli_ingest_shows_a_failed_file_once(kb_config):
    """In text mode the report's `!` line is the failure; its log line (and pypdf's own warning,
    which names no file) would show the same thing again."""
    config, docs = kb_config
    (docs / "broken.pdf").write_bytes(b"%PDF-1.4 not really")
    text = _run("ingest", "--config", str(config))
    assert text.returncode == 1, text.stderr  # partial: the other files were stored
    assert "1 error(s)" in text.stdout
    assert text.stderr.count("broken.pdf") == 1 and "  ! broken.pdf: " in text.stderr
    assert "EOF marker" not in text.stderr
    as_json = _run("ingest", "--config", str(config), "--json")
    assert json.loads(as_json.stdout)["runs"][0]["errors"][0].startswith("broken.pdf: ")
    assert "source.file_failed doc_id=broken.pdf" in as_json.stderr  # the log is the only view beside the object
    assert "in_run_errors" not in as_json.stderr  # a marker for the filter, not a field to read


def test_cli_ingest_unknown_source_is_a_clear_error(kb_config):
    config, _ = kb_config
    proc = _run("ingest", "--config", str(config), "--source", "nope")
    assert proc.returncode == 2 and "unknown source 'nope'" in proc.stderr


def test_cli_ingest_with_no_sources_says_so_instead_of_printing_nothing(capsys):
    from gateway.cli_output import print_reports

    assert print_reports([], as_json=False) == 0
    shown = capsys.readouterr()
    assert shown.out == ""
    assert shown.err == "nothing to ingest: no source is configured for it (a bot's `sources:` in the config)\n"
    assert print_reports([], as_json=True) == 0
    assert json.loads(capsys.readouterr().out) == {"added": 0, "updated": 0, "deleted": 0, "unchanged": 0, "runs": []}


def test_a_first_run_that_failed_does_not_claim_to_keep_chunks(capsys):
    from gateway.cli_output import print_reports

    run = {"bot": "acme", "source": "docs", "status": "failed", "added": 0, "updated": 0, "deleted": 0,
           "unchanged": 0, "duration_s": 0.1, "errors": ["robots.txt could not be fetched"], "total": 0}
    assert print_reports([run], as_json=False) == 1
    assert capsys.readouterr().out == "acme/docs: 0 added, 0 updated, 0 deleted, 0 unchanged chunks in 0.1s, 1 error(s); failed\n"


def test_a_partial_run_is_exit_1_so_that_cron_sees_its_errors(capsys):
    from gateway.cli_output import print_reports

    ok = {"bot": "acme", "source": "docs", "status": "ok", "added": 3, "updated": 0, "deleted": 0,
          "unchanged": 0, "duration_s": 0.1, "errors": [], "total": 3}
    emptied = ok | {"source": "pages", "status": "partial", "added": 0, "unchanged": 40, "total": 40,
                    "errors": ["the source gave no documents; its 4 documents were kept (take the source out of the config to delete them)"]}
    assert print_reports([ok], as_json=True) == 0
    assert print_reports([ok, emptied], as_json=True) == 1
    assert print_reports([ok, emptied], as_json=False) == 1
    assert "  ! the source gave no documents; its 4 documents were kept" in capsys.readouterr().err


def test_eval_text_shows_a_rate_over_no_questions_as_not_applicable(capsys):
    from gateway.cli_output import print_metrics

    metrics = {"recall@1": 0.9, "recall@3": 0.94, "recall@5": 0.98, "recall@10": 0.98, "mrr": 0.9267,
               "refusal_rate": 0.0, "false_refusal_rate": 0.0, "n_answerable": 50, "n_unanswerable": 0}
    print_metrics(metrics)
    lines = dict(line.strip().split(": ", 1) for line in capsys.readouterr().out.splitlines())
    assert lines["refusal_rate"] == "n/a (no unanswerable questions)"
    assert lines["false_refusal_rate"] == "0.000" and lines["mrr"] == "0.927"
    print_metrics(metrics | {"n_answerable": 0, "n_unanswerable": 3, "recall@1": 0.0, "mrr": 0.0, "refusal_rate": 1.0})
    lines = dict(line.strip().split(": ", 1) for line in capsys.readouterr().out.splitlines())
    assert lines["recall@1"] == lines["mrr"] == lines["false_refusal_rate"] == "n/a (no answerable questions)"
    assert lines["refusal_rate"] == "1.000" and lines["n_unanswerable"] == "3"


def test_local_url_reaches_a_wildcard_bind_on_loopback():
    assert local_url("0.0.0.0", 8100) == "http://127.0.0.1:8100"
    assert local_url("::", 8100) == "http://[::1]:8100"
    assert local_url("10.0.0.5", 80) == "http://10.0.0.5:80"


def test_cli_ingest_goes_through_running_server_that_holds_the_index(kb_config):
    """It finds the server where its admin URL file says, whatever HOST/PORT say, and the file goes with the server;
    `chat` does the same through the server's web chat."""
    config, _ = kb_config
    settings = load_settings(config)
    port = free_port()
    url_file = admin_files(settings.qdrant.path)[1]
    assert url_file.name == "qdrant.admin.url"  # beside the index folder, named after it
    app = create_app(settings, start_scheduler=False, url=local_url("0.0.0.0", port))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        assert url_file.read_text() == f"http://127.0.0.1:{port}"
        proc = _run("ingest", "--config", str(config), "--json", env={"HOST": "127.0.0.1", "PORT": "1"})
        assert proc.returncode == 0, proc.stderr
        assert f"held by the running server; ingesting through it at http://127.0.0.1:{port}" in proc.stderr
        assert json.loads(proc.stdout)["added"] >= 2
        # At a terminal, the server streams its progress and the CLI draws the same bar as without a server.
        code, stdout, terminal = _run_on_a_terminal("ingest", "--config", str(config))
        assert code == 0 and "acme/docs: no document changed (chunks: 0 added, 0 updated, 0 deleted" in stdout, terminal
        assert "ingesting through it" in terminal and "2/2" in terminal
        # `chat` beside the server talks to its web chat, leaves the server's files alone, and loads none of
        # what answers locally (it took 16 s to start, loading LiteLLM and the app it did not use).
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        probe = ("import sys; from gateway.cli import main; code = main(sys.argv[1:]); print('loaded:', [m for m in ("
                 "'litellm', 'qdrant_client', 'fastembed', 'uvicorn') if m in sys.modules], file=sys.stderr); exit(code)")
        chat = subprocess.run([sys.executable, "-c", probe, "chat", "--config", str(config)], cwd=ROOT, env=env,
                              input="How much does the Plus plan cost?\n\n", capture_output=True, text=True,
                              timeout=120)
        assert chat.returncode == 0 and chat.stderr.splitlines()[-1] == "loaded: []", chat.stderr
        assert f"chatting through its web chat at http://127.0.0.1:{port}" in chat.stderr
        # Nor does `ingest`: it loaded the models before it found the index held (7 s for a run of 0.0 s).
        again = subprocess.run([sys.executable, "-c", probe, "ingest", "--config", str(config), "--json"], cwd=ROOT,
                               env=env, capture_output=True, text=True, timeout=120)
        assert again.returncode == 0 and again.stderr.splitlines()[-1] == "loaded: []", again.stderr
        assert "$12" in chat.stdout and "[1]" in chat.stdout
        assert url_file.exists() and admin_files(settings.qdrant.path)[0].exists()
    finally:
        server.should_exit = True
        thread.join(30)
    assert not url_file.exists() and not admin_files(settings.qdrant.path)[0].exists()


def test_cli_eval_prints_contract_keys_and_the_questions_to_look_at(tmp_path, kb_config):
    _, docs = kb_config
    (docs / "scan.pdf").write_bytes(b"%PDF-1.4 not a real pdf")
    questions = tmp_path / "q.jsonl"
    questions.write_text("\n".join(json.dumps(q) for q in [
        {"question": "How much is the Plus plan?", "gold_texts": ["The Plus plan costs $12 per month"]},
        {"question": "What is E-SYNC-409?", "gold_texts": ["two devices edited the same note"]},
        {"question": "What is the capital of Peru?", "answerable": False},
    ]) + "\n")
    proc = _run("eval", "--docs", str(docs), "--questions", str(questions), "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)  # one object: the warning below went to stderr
    assert set(result) == {"recall@1", "recall@3", "recall@5", "recall@10", "mrr", "refusal_rate",
                           "false_refusal_rate", "n_answerable", "n_unanswerable"}
    assert result["n_answerable"] == 2 and result["n_unanswerable"] == 1
    assert result["recall@5"] == 1.0 and result["refusal_rate"] == 1.0
    assert "warning: scan.pdf was not loaded" in proc.stderr
    assert proc.stderr.count("scan.pdf") == 1  # not its log line as well

    # Text mode lists what went wrong: here an unanswerable the documents do answer.
    questions.write_text("\n".join(json.dumps(q) for q in [
        {"question": "What is E-SYNC-409?", "answerable": False},
        {"question": "What is the capital of Peru?", "answerable": False},
    ]) + "\n")
    proc = _run("eval", "--docs", str(docs), "--questions", str(questions))
    assert proc.returncode == 0, proc.stderr
    misses = proc.stdout.split("question(s) to look at:")[1].strip().splitlines()
    assert len(misses) == 1, proc.stdout
    assert misses[0].startswith("- 'What is E-SYNC-409?': unanswerable, not refused; best dense ")
    assert misses[0].endswith("first chunk from 'Sync errors'")

    # A gold text the documents lack is a miss by the contract's rule, named as a label to fix, by its line.
    questions.write_text(json.dumps({"question": "How much is the Plus plan?", "gold_texts": ["free forever"]}) + "\n")
    proc = _run("eval", "--docs", str(docs), "--questions", str(questions), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["recall@10"] == 0.0
    assert f"warning: {questions}:1: no gold text of 'How much is the Plus plan?' is in any document" in proc.stderr
    proc = _run("eval", "--docs", str(docs), "--questions", str(questions))
    assert "- 'How much is the Plus plan?': no document holds its gold text (a label to fix);" in proc.stdout


def test_cli_eval_with_an_api_embedding_model_says_what_failed_and_what_its_gate_needs(tmp_path, kb_config):
    _, docs = kb_config
    config = write_config(tmp_path, embedding={"model": "litellm/openai/text-embedding-3-small"})
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question": "How much is the Plus plan?", "gold_texts": ["$12 per month"]}) + "\n")
    env = {"OPENAI_API_BASE": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "sk-fake"}  # nothing listens there
    proc = _run("eval", "--config", str(config), "--docs", str(docs), "--questions", str(questions), env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "Give Feedback" not in proc.stderr + proc.stdout
    lines = proc.stderr.strip().splitlines()
    # The bar calibrated for MiniLM is named before the run, and the provider's failure is one line.
    assert lines[0].startswith("note: bot 'acme': gate 1's retrieval.min_dense_score 0.46"), proc.stderr
    assert lines[-1].startswith("error: the embedding model litellm/openai/text-embedding-3-small failed: ")
    assert "Connection error" in lines[-1], proc.stderr


async def _arun(*args: str, env: dict | None = None, stdin: str = "", timeout: float = 300):
    import asyncio

    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True", **(env or {})}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", *args, cwd=ROOT, env=full_env, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), timeout)
    return proc.returncode, out.decode(), err.decode()


async def test_cli_telegram_set_webhook_registers_url_and_secret(tmp_path):
    from tests.fakes.telegram_api import FakeTelegramAPI

    token = "123456:cli-test-token"
    async with FakeTelegramAPI(token) as fake:
        bot = {"name": "acme", "channels": {"telegram": {
            "token": "${CLI_TG_TOKEN}", "webhook_secret": "${CLI_TG_SECRET}", "api_base": fake.base_url}}}
        config = write_config(tmp_path, bots=[bot])
        code, out, err = await _arun("telegram", "set-webhook", "--config", str(config), "--bot", "acme",
                                     "--url", "https://bots.example.com/",
                                     env={"CLI_TG_TOKEN": token, "CLI_TG_SECRET": "s3cret-Value_1"})
        assert code == 0, err
        assert "https://bots.example.com/webhooks/acme/telegram" in out
        call = fake.calls("setWebhook")[-1]
        assert call.params["url"] == "https://bots.example.com/webhooks/acme/telegram"
        assert call.params["secret_token"] == "s3cret-Value_1"


@pytest.mark.parametrize("web", [{}, {"enabled": False}], ids=["web-chat", "no-web-chat"])
def test_cli_chat_answers_in_the_terminal(kb_config, web):
    """Also for a bot without the web chat (a Telegram-only bot): each reply was shown, then logged and stored
    as not delivered ("channel 'web' is not enabled"). It says what it loads first (10-30 s of silence)."""
    config, _ = kb_config
    config.write_text(config.read_text().replace("web: {}", f"web: {json.dumps(web)}"))
    assert _run("ingest", "--config", str(config)).returncode == 0
    proc = _run("chat", "--config", str(config), input="How much does the Plus plan cost?\n\n")
    assert proc.returncode == 0 and f"no server holds {config.parent / 'qdrant'}; loading bot 'acme'" in proc.stderr
    answer = next(line for line in proc.stdout.splitlines() if "acme>" in line)
    assert "$12" in answer and "[1]" in answer
    assert "[1] Plans" in proc.stdout  # the citation, listed under the answer
    assert "outbound.failed" not in proc.stderr
    with sqlite3.connect(config.parent / "gateway.db") as db:
        assert db.execute("SELECT status FROM messages WHERE direction = 'out'").fetchall() == [("sent",)]


def test_cli_chat_on_a_bot_never_ingested_says_to_ingest_first(kb_config):
    config, _ = kb_config
    assert _run("db", "upgrade", "--config", str(config)).returncode == 0
    proc = _run("chat", "--config", str(config), input="\n")
    assert proc.returncode == 0, proc.stderr
    assert "note: bot 'acme' has nothing in its index yet: run `gateway ingest` first" in proc.stderr


def test_cli_chat_names_a_gate_bar_another_embedding_model_leaves_uncalibrated(tmp_path):
    bot = {"name": "acme", "channels": {"web": {}}}
    config = write_config(tmp_path, bots=[bot], embedding={"model": "litellm/openai/text-embedding-3-small"})
    assert _run("db", "upgrade", "--config", str(config)).returncode == 0
    proc = _run("chat", "--config", str(config), input="\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith("note: bot 'acme': gate 1's retrieval.min_dense_score 0.46"), proc.stderr
    assert "Chatting with 'acme'" in proc.stdout


def _run_on_a_terminal(*args: str, timeout: float = 300) -> tuple[int, str, str]:
    """The CLI with stderr on a pseudo-terminal, as a user at a shell sees it: (code, stdout, terminal)."""
    import pty
    import select

    master, slave = pty.openpty()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "COLUMNS": "120"}
    proc = subprocess.Popen([sys.executable, "-m", "gateway", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=slave, text=True)
    os.close(slave)
    shown = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while (left := deadline - time.monotonic()) > 0:
            if not select.select([master], [], [], left)[0]:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal (EIO)
                break
            if not chunk:
                break
            shown += chunk
        else:
            proc.kill()
            pytest.fail(f"gateway {' '.join(args)} did not finish in {timeout} s")
    finally:
        os.close(master)
    stdout = proc.stdout.read() if proc.stdout else ""
    return proc.wait(timeout), stdout, shown.decode(errors="replace")


def test_cli_ingest_and_eval_show_progress_on_a_terminal(tmp_path, kb_config):
    config, docs = kb_config
    code, stdout, terminal = _run_on_a_terminal("ingest", "--config", str(config))
    assert code == 0 and "acme/docs: " in stdout
    assert "2/2" in terminal  # the bar counted both documents

    questions = tmp_path / "q.jsonl"
    questions.write_text("\n".join(json.dumps(q) for q in [
        {"question": "How much is the Plus plan?", "gold_texts": ["The Plus plan costs $12 per month"]},
        {"question": "What is the capital of Peru?", "answerable": False},
    ]) + "\n")
    code, stdout, terminal = _run_on_a_terminal("eval", "--docs", str(docs), "--questions", str(questions))
    assert code == 0 and "recall@1" in stdout
    assert "documents" in terminal and "questions" in terminal and "2/2" in terminal
