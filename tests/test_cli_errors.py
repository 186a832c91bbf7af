"""The CLI's answers to a user's mistakes: one clear line and a fitting exit code, never a traceback
(review findings 4, 9, 16 and 18)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import httpx
import pytest
import uvicorn

from gateway.admin_client import ingest_via_server
from gateway.app import create_app
from gateway.cli import local_url, main
from gateway.settings import load_settings
from tests.conftest import ROOT, upgrade, write_config
from tests.scale.replicas import free_port
from tests.test_cli import PLANS, _run


def _docs(tmp_path, name: str = "docs"):
    docs = tmp_path / name
    docs.mkdir()
    (docs / "plans.md").write_text(PLANS)
    return docs


def _bot(name: str, *sources: str, docs) -> dict:
    return {"name": name, "channels": {"web": {}}, "sources": [
        {"name": s, "type": "directory", "path": str(docs), "schedule": "0 3 * * *"} for s in sources]}


# `serve` too: its check is the only one before the server starts (Services.start has none of its own).
@pytest.mark.parametrize("command", [["ingest"], ["forget", "--channel", "web", "--user", "u1"],
                                     ["serve", "--port", "1"]])
def test_a_command_before_db_upgrade_says_to_run_it(tmp_path, command):
    config = write_config(tmp_path, bots=[_bot("acme", "docs", docs=_docs(tmp_path))])
    proc = _run(command[0], "--config", str(config), *command[1:])
    assert proc.returncode == 1
    assert proc.stderr.strip() == (f"error: the database sqlite+aiosqlite:///{tmp_path / 'gateway.db'} does not "
                                   f"exist: run `gateway db upgrade --config {config}` (or `make run`)")
    assert not (tmp_path / "gateway.db").exists()  # asking did not make an empty one


def test_a_database_behind_the_code_is_refused_at_start(tmp_path):
    """A deploy whose new code starts before its migration ran: /readyz said ready while every query
    of a new column failed (GET /v1/escalations was a 500, escalations never opened)."""
    from gateway.preflight import migration_revisions

    config = write_config(tmp_path, bots=[{"name": "acme", "channels": {"web": {}}}])
    settings = load_settings(config)
    head, known = migration_revisions()
    behind = max(known - {head})
    upgrade(settings.database_url, behind)
    proc = _run("serve", "--config", str(config), "--port", "1")
    assert proc.returncode == 1
    assert proc.stderr.strip().endswith(f"is at migration {behind}, and this version of the gateway needs {head}: "
                                        f"run `gateway db upgrade --config {config}`"), proc.stderr
    assert _run("db", "upgrade", "--config", str(config)).returncode == 0
    assert _run("forget", "--config", str(config), "--channel", "web", "--user", "nobody").returncode == 0


def test_a_relative_database_path_from_another_folder_is_named_and_not_created(tmp_path):
    """Run from the wrong folder, a command used to leave an empty var/gateway.db there, and to say
    only "has no schema", whose `db upgrade` would then make a second database in that folder."""
    config = write_config(tmp_path, bots=[{"name": "acme", "channels": {"web": {}}}],
                          database_url="sqlite:///var/gateway.db")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = subprocess.run([sys.executable, "-m", "gateway", "chat", "--config", str(config)], cwd=elsewhere,
                          input="\n", capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                               "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 1
    assert (f"({elsewhere / 'var' / 'gateway.db'}, relative to the working directory) does not exist" in proc.stderr
            and "or give database_url an absolute path" in proc.stderr), proc.stderr
    assert list(elsewhere.iterdir()) == []
    upgrade = [sys.executable, "-m", "gateway", "db", "upgrade", "--config", str(config)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    first, again = (subprocess.run(upgrade, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
                    for _ in range(2))
    assert "database was created at the latest migration" in first.stdout, first.stderr
    assert "database is at the latest migration" in again.stdout
    assert (elsewhere / "var" / "gateway.db").exists()


def test_ingest_source_without_bot_ingests_it_for_every_bot_that_has_it(tmp_path):
    docs = _docs(tmp_path)
    config = write_config(tmp_path, bots=[_bot("alpha", "help", docs=docs), _bot("beta", "manual", docs=docs),
                                          _bot("gamma", "manual", "help", docs=docs)])
    assert _run("db", "upgrade", "--config", str(config)).returncode == 0

    proc = _run("ingest", "--config", str(config), "--source", "help", "--json")
    assert proc.returncode == 0, proc.stderr
    runs = json.loads(proc.stdout)["runs"]
    assert [(r["bot"], r["source"], r["status"]) for r in runs] == [("alpha", "help", "ok"), ("gamma", "help", "ok")]

    proc = _run("ingest", "--config", str(config), "--source", "nope")
    assert proc.returncode == 2 and proc.stderr.strip() == "error: unknown source 'nope': no bot has it (the sources: help, manual)"
    proc = _run("ingest", "--config", str(config), "--bot", "alpha", "--source", "manual")
    assert proc.returncode == 2 and proc.stderr.strip() == "error: unknown source 'manual' of bot 'alpha' (its sources: help)"


@contextmanager
def serving(config):
    """The real app on a free port in a thread, as `gateway serve` runs it (it writes its admin URL file)."""
    port = free_port()
    app = create_app(load_settings(config), start_scheduler=False, url=local_url("127.0.0.1", port))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        _wait_healthy(port)
        yield port
    finally:
        server.should_exit = True
        thread.join(30)


def test_an_unknown_bot_is_the_same_error_locally_and_through_the_server(tmp_path, capsys):
    config = write_config(tmp_path, bots=[_bot("acme", "docs", docs=_docs(tmp_path))])
    assert _run("db", "upgrade", "--config", str(config)).returncode == 0
    local = _run("ingest", "--config", str(config), "--bot", "nope")
    assert local.returncode == 2 and local.stderr.strip() == "error: unknown bot 'nope' (configured: acme)"
    assert "held by the running server" not in local.stderr

    # The CLI checks the name against its own configuration first, which is the server's (a changed
    # one is refused, below); the server's 404 still gives the same line and code.
    with serving(config):
        code = asyncio.run(ingest_via_server(load_settings(config), bot="nope", source=None, as_json=False))
    remote = capsys.readouterr().err
    assert "held by the running server" in remote  # it really went through the server
    assert code == 2 and remote.strip().splitlines()[-1] == "error: unknown bot 'nope' (configured: acme)"
    # Other commands that take --bot say it as plainly (chat printed a KeyError traceback), and all name
    # the configured ones (ingest named none, so a typo sent the reader to the config).
    chat = _run("chat", "--config", str(config), "--bot", "nope")
    assert chat.returncode == 2 and chat.stderr.strip() == "error: unknown bot 'nope' (configured: acme)"


def _wait_healthy(port: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    pytest.fail(f"the server on port {port} did not become healthy")


@pytest.mark.parametrize("k", ["0", "-3"])
def test_eval_refuses_k_below_one(tmp_path, k):
    proc = _run("eval", "--docs", str(tmp_path), "--questions", str(tmp_path / "q.jsonl"), "--k", k)
    assert proc.returncode == 2 and f"argument --k: must be at least 1, got {int(k)}" in proc.stderr


def test_eval_with_gateway_config_naming_a_missing_file_is_a_config_error(tmp_path):
    # It used to run silently on built-in defaults; every other command refuses such a config.
    (tmp_path / "plans.md").write_text(PLANS)
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question": "How much is the Plus plan?", "gold_texts": ["$12"]}) + "\n")
    missing = tmp_path / "nope.yaml"
    proc = _run("eval", "--docs", str(tmp_path), "--questions", str(questions), env={"GATEWAY_CONFIG": str(missing)})
    assert proc.returncode == 2 and "nope.yaml" in proc.stderr and "Traceback" not in proc.stderr


def test_eval_on_an_empty_folder_is_an_error_not_a_row_of_zeros(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question": "How much is the Plus plan?", "gold_texts": ["$12 per month"]}) + "\n")
    proc = _run("eval", "--docs", str(empty), "--questions", str(questions), "--json")
    assert proc.returncode == 1 and proc.stdout == ""
    assert f"error: no documents were ingested from {empty}" in proc.stderr
    assert "Traceback" not in proc.stderr

    (empty / "manual.docx").write_bytes(b"PK")  # a type it does not read: named, so the user knows why
    proc = _run("eval", "--docs", str(empty), "--questions", str(questions), "--json")
    assert proc.returncode == 1 and "files of other types were not read: .docx (1)" in proc.stderr
    (empty / "manual.docx").unlink()

    (empty / "plans.md").write_text(PLANS)  # and no warning once there is something to ingest
    proc = _run("eval", "--docs", str(empty), "--questions", str(questions), "--json")
    assert proc.returncode == 0 and "warning" not in proc.stderr


@pytest.mark.parametrize("command", [["db", "upgrade"], ["ingest"], ["serve"]])
def test_an_empty_or_unsupported_database_url_is_a_config_error_in_every_command(tmp_path, command):
    config = write_config(tmp_path, database_url="${UNSET_DATABASE_URL_FOR_TEST}")
    proc = _run(*command, "--config", str(config))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("config error: database_url: is empty") and "Traceback" not in proc.stderr
    config.write_text(config.read_text().replace("${UNSET_DATABASE_URL_FOR_TEST}", "foo://bar"))
    proc = _run(*command, "--config", str(config))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "config error: database_url: unsupported database driver 'foo'; use SQLite (sqlite:// or sqlite+aiosqlite://) "
        "or PostgreSQL (postgresql:// or postgresql+asyncpg://)"]


def test_a_redis_url_without_its_scheme_is_a_config_error_not_a_traceback_at_serve(tmp_path):
    config = write_config(tmp_path)
    proc = _run("serve", "--config", str(config), env={"REDIS_URL": "localhost:6379"})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "config error: redis_url: not a Redis URL; use redis://host:6379/0 (or rediss:// for TLS) (from the "
        "environment variable REDIS_URL, which overrides the file)"]


def test_db_upgrade_against_an_unreachable_database_is_one_line(tmp_path):
    url = f"postgresql://nouser@127.0.0.1:{free_port()}/x"  # nothing listens there
    proc = _run("db", "upgrade", "--config", str(write_config(tmp_path, database_url=url)))
    assert proc.returncode == 1
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith(f"error: cannot reach the database {url}: ")


def test_db_upgrade_error_line_masks_the_password_as_its_success_line_does(tmp_path):
    """The success line printed `gw:***@`, the error line `gw:[REDACTED]@` with `sslpassword=%2A%2A%2A`."""
    url = f"postgresql://gw:s3cret@127.0.0.1:{free_port()}/x?sslmode=prefer&sslpassword=k3y-pass"
    proc = _run("db", "upgrade", "--config", str(write_config(tmp_path, database_url=url)))
    assert proc.returncode == 1
    assert "s3cret" not in proc.stderr and "k3y-pass" not in proc.stderr and "***" not in proc.stderr
    assert proc.stderr.startswith(f"error: cannot reach the database postgresql://gw:[REDACTED]@{url.split('@')[1]}"
                                  .replace("k3y-pass", "[REDACTED]")), proc.stderr


def test_serve_with_an_unknown_embedding_model_is_a_config_error_before_start(tmp_path):
    config = write_config(tmp_path, embedding={"model": "no-such-model"})
    proc = _run("serve", "--config", str(config), "--port", str(free_port()), timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "config error: embedding.model: 'no-such-model' is not a model fastembed knows: write 'minilm-int8' "
        "(shipped here), a fastembed model name such as 'BAAI/bge-small-en-v1.5' with its files in "
        "embedding.model_path, or 'litellm/<model>' for an API model (README: Configuration)"]


@pytest.mark.parametrize("embedding, expected", [
    # A name fastembed knows, with no copy here and no model hub to fetch it from.
    ({"model": "BAAI/bge-small-en-v1.5"}, "config error: embedding.model: Could not load model BAAI/bge-small-en-v1.5 "
     "from any source. It is not in fastembed's cache and cannot be downloaded here: put its files in a folder and "
     "set embedding.model_path to it"),
    # A folder that holds none of the model's files.
    ({"model": "sentence-transformers/all-MiniLM-L6-v2", "model_path": "EMPTY"},
     "config error: embedding.model_path: cannot load sentence-transformers/all-MiniLM-L6-v2 from EMPTY: "),
])
def test_serve_with_a_known_embedding_model_it_cannot_load_is_a_config_error_before_start(tmp_path, embedding,
                                                                                            expected):
    """Both passed the name check and failed in the app's start: a traceback, "Application startup failed",
    exit 3, where `ingest` with the same file said one `config error:` line."""
    empty = tmp_path / "empty"
    empty.mkdir()
    embedding = {key: str(empty) if value == "EMPTY" else value for key, value in embedding.items()}
    config = write_config(tmp_path, embedding=embedding)
    assert _run("db", "upgrade", "--config", str(config)).returncode == 0
    proc = _run("serve", "--config", str(config), "--port", str(free_port()), timeout=120,
                env={"FASTEMBED_CACHE_PATH": str(tmp_path / "empty-cache")})
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(expected.replace("EMPTY", str(empty))), proc.stderr


def test_a_busy_index_beside_another_servers_is_not_ingested_through_that_server(tmp_path, capsys):
    """Two configurations whose index folders share a parent: the running server holds folder A, and the
    CLI of configuration B finds B's folder busy (another process holds it). It used to find A's
    `admin.token` beside B's folder and ingest through server A: the run recorded in A's database, B's
    index untouched, and "ok" printed."""
    import yaml

    docs = _docs(tmp_path)
    config_a = write_config(tmp_path, bots=[_bot("acme", "docs", docs=docs)])
    data = yaml.safe_load(config_a.read_text())
    data["qdrant"]["path"] = str(tmp_path / "qdrant-b")
    data["database_url"] = f"sqlite+aiosqlite:///{tmp_path / 'b.db'}"
    config_b = tmp_path / "b.yaml"
    config_b.write_text(yaml.safe_dump(data))
    assert _run("db", "upgrade", "--config", str(config_a)).returncode == 0
    with serving(config_a):
        # What `gateway ingest` does when B's folder is held: look for the server that holds it.
        code = asyncio.run(ingest_via_server(load_settings(config_b), bot=None, source=None, as_json=True))
    err = capsys.readouterr().err
    assert code == 1 and "held by the running server" not in err, err
    assert "no running gateway server was found" in err and "qdrant-b.admin.token is missing" in err


def test_serve_on_an_index_another_process_holds_is_one_line(tmp_path):
    """A 60-line traceback ending "Application startup failed"; then "a running `gateway serve`", naming none."""
    config = write_config(tmp_path, bots=[_bot("acme", "docs", docs=_docs(tmp_path))])
    assert _run("db", "upgrade", "--config", str(config)).returncode == 0
    with serving(config) as port:
        second = _run("serve", "--config", str(config), "--port", str(free_port()), timeout=120)
    assert second.returncode == 1 and "Traceback" not in second.stderr, second.stderr
    assert second.stderr.strip().splitlines() == [
        f"error: the Qdrant folder {tmp_path / 'qdrant'} is in use by another process: the `gateway serve` at "
        f"http://127.0.0.1:{port}. Stop it first, or use a Qdrant server (qdrant.url) to run more than one process "
        "on one index (`--role web` processes hold no index)"]


# Not `db upgrade`: it reads database_url alone (tests/test_cli_db_upgrade_database_url_only.py).
@pytest.mark.parametrize("command", [["serve"], ["ingest"], ["chat"], ["forget", "--channel", "web", "--user", "u1"],
                                     ["telegram", "set-webhook", "--bot", "acme", "--url", "https://x.example"]])
def test_an_unknown_log_level_is_a_config_error_in_every_command(tmp_path, monkeypatch, capsys, command):
    # `log_level: verbose` crashed `serve` in the logging setup: `KeyError: 'level verbose'`.
    config = write_config(tmp_path, log_level="verbose")
    assert main([*command, "--config", str(config)]) == 2
    expected = ("config error: log_level: unknown level {!r}; use one of DEBUG, INFO, WARNING, ERROR, CRITICAL "
                "(in any case)")
    assert capsys.readouterr().err.strip().splitlines() == [expected.format("verbose")]
    monkeypatch.setenv("LOG_LEVEL", "loud")  # the environment overrides the file, and is checked the same way
    assert main([*command, "--config", str(write_config(tmp_path))]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        expected.format("loud") + " (from the environment variable LOG_LEVEL, which overrides the file)"]


def test_an_unknown_log_level_in_the_environment_is_a_config_error_for_eval_without_a_config(tmp_path, monkeypatch,
                                                                                             capsys):
    monkeypatch.chdir(tmp_path)  # no config.yaml here: eval runs on the defaults and the environment
    monkeypatch.delenv("GATEWAY_CONFIG", raising=False)
    monkeypatch.setenv("LOG_LEVEL", "loud")
    assert main(["eval", "--docs", str(_docs(tmp_path)), "--questions", str(tmp_path / "q.jsonl")]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("config error: log_level: unknown level 'loud'")


def test_a_log_level_is_read_in_any_case(tmp_path, monkeypatch):
    monkeypatch.setenv("LOG_LEVEL", "warn")
    assert load_settings(write_config(tmp_path)).log_level == "WARNING"
    monkeypatch.setenv("LOG_LEVEL", "debug")
    assert load_settings(write_config(tmp_path)).log_level == "DEBUG"


@pytest.mark.parametrize("channel", ["sms", "Web"])
def test_forget_an_unknown_channel_is_refused_and_nothing_is_recorded(tmp_path, capsys, channel):
    # It printed "deleted 0 contacts … (recorded in data_deletions)", exit 0, and wrote an audit row.
    import sqlite3

    config = write_config(tmp_path)
    assert _run("db", "upgrade", "--config", str(config)).returncode == 0
    with pytest.raises(SystemExit) as exited:
        main(["forget", "--config", str(config), "--channel", channel, "--user", "me-1"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"gateway forget: error: argument --channel: invalid choice: {channel!r} (choose from 'web', 'telegram', "
        "'slack', 'discord', 'whatsapp')")
    deletions = "select count(*) from data_deletions"
    with sqlite3.connect(tmp_path / "gateway.db") as db:
        assert db.execute(deletions).fetchone() == (0,)
    assert _run("forget", "--config", str(config), "--channel", "web", "--user", "me-1").returncode == 0
    with sqlite3.connect(tmp_path / "gateway.db") as db:
        assert db.execute(deletions).fetchone() == (1,)  # a known channel is recorded, as it should be


def test_forget_logs_its_deletion_only(tmp_path):
    # At INFO, alembic's "setup plugin alembic.autogenerate.schemas" and six more came before the answer.
    config = write_config(tmp_path, log_level="INFO")
    assert _run("db", "upgrade", "--config", str(config)).returncode == 0
    proc = _run("forget", "--config", str(config), "--channel", "web", "--user", "me-1")
    assert proc.returncode == 0 and proc.stdout.startswith("deleted 0 contacts")
    lines = proc.stderr.splitlines()
    # The log line, and the note that no contact had the id (the user id nobody has: nothing else).
    assert len(lines) == 2 and "retention.forgot_contact" in lines[0], proc.stderr
    assert lines[1].startswith("note: no web contact has the user id 'me-1'"), proc.stderr


def test_a_port_in_the_environment_that_is_no_number_concerns_serve_only(tmp_path):
    """`PORT` was read as a number while the parser was built: `PORT=abc` (or an empty `PORT=`) made every
    command, `db upgrade` and `--help` too, end in a ValueError traceback."""
    config = write_config(tmp_path)
    upgraded = _run("db", "upgrade", "--config", str(config), env={"PORT": "abc"})
    assert upgraded.returncode == 0, upgraded.stderr
    served = _run("serve", "--config", str(config), env={"PORT": "abc"})
    assert served.returncode == 2 and served.stderr.strip().splitlines()[-1] == (
        "gateway serve: error: argument --port: 'abc' is not a port: give a number from 1 to 65535 (PORT=… with make run)")


def test_chat_beside_a_server_with_a_bot_without_web_chat_says_why_it_cannot(tmp_path):
    """Through the server, `chat` talks to the bot's web chat: each line came back "(the server refused it:
    …)", and the session still ended with status 0."""
    bot = {**_bot("acme", "docs", docs=_docs(tmp_path)), "channels": {"web": {"enabled": False}}}
    config = write_config(tmp_path, bots=[bot])
    assert _run("db", "upgrade", "--config", str(config)).returncode == 0
    with serving(config):
        proc = subprocess.run([sys.executable, "-m", "gateway", "chat", "--config", str(config)], cwd=ROOT,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"}, input="How much is Plus?\n",
                              capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "refused" not in proc.stdout
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: bot 'acme' has no web chat, which is how `gateway chat` reaches the running server that holds the "
        "index; stop the server to chat with it here, or give it `web: {}`")
