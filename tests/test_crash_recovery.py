"""A real server process is SIGKILLed mid-answer; after restart every stored message is answered once,
and a tool call it had finished is not run a second time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
from sqlalchemy import create_engine, select

from storage.models import Message
from tests.conftest import ROOT, upgrade, write_config
from tests.fakes.openai_server import FakeOpenAI, ToolCallSpec, Turn
from tests.pipeline.sample_tools import TICKETS_FILE_ENV
from tests.scale.replicas import free_port

CRASH_SESSION = "crash-0f3b9a7c2e6d4815"  # a served gateway, so the real session id rule: 16+ characters


def _serve(config, port: int, **env_vars: str) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True", **env_vars}
    log = open(config.parent / f"server-{port}-{time.monotonic_ns()}.log", "wb")  # a pipe could fill and block
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--config", str(config), "--port", str(port)],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    proc.log_path = log.name
    return proc


def _started(server: subprocess.Popen, port: int) -> bool:
    if server.poll() is not None:
        raise AssertionError(f"server exited with {server.returncode}:\n{open(server.log_path).read()[-3000:]}")
    return _healthy(port)


def _wait_until(predicate, *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _stored(db, external_id: str) -> bool:
    """Whether the inbound message `external_id` is in the SQLite database `db` (the server writes it)."""
    engine = create_engine(f"sqlite:///{db}")
    try:
        with engine.connect() as conn:
            return conn.execute(select(Message.id).where(Message.external_id == external_id)).first() is not None
    finally:
        engine.dispose()


def _post(port: int, message_id: str, text: str) -> None:
    """Send a chat message and do not wait for the answer (the server stores it before answering)."""
    try:  # a loaded machine may take more than 1.5 s to accept the connection: only the answer is not waited for
        httpx.post(f"http://127.0.0.1:{port}/v1/bots/acme/chat", timeout=httpx.Timeout(30, read=1.5),
                   json={"session_id": CRASH_SESSION, "text": text, "message_id": message_id})
    except httpx.ReadTimeout:
        pass


@pytest.mark.timeout(600)  # generous: a loaded 2-core machine takes long to import a server
def test_crash_restart_answers_every_stored_message_exactly_once(tmp_path):
    with FakeOpenAI() as fake:
        # The first answer hangs, so the process is killed in the middle of the LLM call.
        fake.script("slow", Turn(text="never delivered", delay=60), Turn(text="I don't know."),
                    Turn(text="I don't know."), Turn(text="I don't know."), Turn(text="I don't know."))
        db = tmp_path / "gateway.db"
        config = write_config(tmp_path, database_url=f"sqlite+aiosqlite:///{db}",
                              models=[{"model_name": "slow", "litellm_params": {
                                  "model": "openai/slow", "api_base": fake.base_url, "api_key": "${FAKE_KEY:-sk-fake}",
                                  "timeout": 90}}],
                              bots=[{"name": "acme", "model": "slow", "channels": {"web": {}}}],
                              worker={"lease_seconds": 2, "poll_interval": 0.2, "reply_timeout": 30})
        upgrade(f"sqlite+aiosqlite:///{db}")
        port = free_port()
        server = _serve(config, port)
        try:
            _wait_until(lambda: _started(server, port), timeout=240, what="the first server")
            _post(port, "m1", "first question")
            _wait_until(lambda: len(fake.requests_for("slow")) == 1, timeout=60, what="the model call")
            _post(port, "m2", "second question")
            # Stored before the kill (1.5 s of waiting for its answer was not always enough on a loaded machine).
            _wait_until(lambda: _stored(db, f"{CRASH_SESSION}/m2"), timeout=60, what="the second question stored")
            _post(port, "m1", "first question")  # a client retry of m1: must not become a third message
            server.send_signal(signal.SIGKILL)
            server.wait(60)  # a loaded machine stops a server in more than 10 s
        finally:
            if server.poll() is None:
                server.kill()

        engine = create_engine(f"sqlite:///{db}")
        with engine.connect() as conn:
            stored = conn.execute(select(Message.external_id, Message.status).where(Message.direction == "in")
                                  .order_by(Message.id)).all()
        assert [tuple(r) for r in stored] == [(f"{CRASH_SESSION}/m1", "pending"),
                                              (f"{CRASH_SESSION}/m2", "pending")]  # web ids are session/message_id

        server = _serve(config, port)
        try:
            _wait_until(lambda: _started(server, port), timeout=240, what="the restarted server")

            def answered(count: int) -> bool:
                with engine.connect() as conn:
                    return len(conn.execute(select(Message.id).where(Message.direction == "out",
                                                                     Message.status == "sent")).all()) >= count
            _wait_until(lambda: answered(2), timeout=120, what="both answers after restart")
            # A later question of the same conversation is answered after every earlier one: once it is, a
            # second answer to m1 or m2 would be stored.
            _post(port, "m3", "third question")
            _wait_until(lambda: answered(3), timeout=120, what="the later question's answer")
        finally:
            server.terminate()
            server.wait(60)  # a loaded machine stops a server in more than 10 s

        with engine.connect() as conn:
            inbound = conn.execute(select(Message.id, Message.status).where(Message.direction == "in")
                                   .order_by(Message.id)).all()
            replies = conn.execute(select(Message.reply_to_id, Message.status).where(Message.direction == "out")
                                   .order_by(Message.id)).all()
        assert [s for _, s in inbound] == ["done", "done", "done"]
        assert [r for r, _ in replies] == [inbound[0].id, inbound[1].id, inbound[2].id]  # once each, in order
        assert {s for _, s in replies} == {"sent"}
        engine.dispose()


@pytest.mark.timeout(600)
def test_a_tool_call_finished_before_a_crash_is_not_run_again_after_restart(tmp_path):
    tickets = tmp_path / "tickets.jsonl"
    refund = ToolCallSpec("create_ticket", {"title": "Refund order A-7"}, id="t1")
    with FakeOpenAI() as fake:
        # The ticket is opened, then the process is killed while the model writes the answer. After the
        # restart the model asks for the same ticket again, as a model rerun from the start does.
        fake.script("slow", Turn(tool_calls=(refund,)), Turn(text="never delivered", delay=60),
                    Turn(tool_calls=(refund,)), Turn(text="Ticket T-1 is open for your refund."))
        db = tmp_path / "gateway.db"
        ticket_tool = {"name": "create_ticket", "type": "python",
                       "import_path": "tests.pipeline.sample_tools:create_ticket",
                       "parameters": {"type": "object", "properties": {"title": {"type": "string"}}}}
        config = write_config(tmp_path, database_url=f"sqlite+aiosqlite:///{db}",
                              models=[{"model_name": "slow", "litellm_params": {
                                  "model": "openai/slow", "api_base": fake.base_url, "api_key": "${FAKE_KEY:-sk-fake}",
                                  "timeout": 90}}],
                              bots=[{"name": "acme", "model": "slow", "channels": {"web": {}},
                                     "tools": [ticket_tool]}],
                              worker={"lease_seconds": 2, "poll_interval": 0.2, "reply_timeout": 30})
        upgrade(f"sqlite+aiosqlite:///{db}")
        port = free_port()
        server = _serve(config, port, **{TICKETS_FILE_ENV: str(tickets)})
        try:
            _wait_until(lambda: _started(server, port), timeout=240, what="the first server")
            _post(port, "t1", "Please open a ticket for my refund")
            _wait_until(lambda: len(fake.requests_for("slow")) == 2, timeout=60, what="the answer after the tool")
            server.send_signal(signal.SIGKILL)
            server.wait(60)  # a loaded machine stops a server in more than 10 s
        finally:
            if server.poll() is None:
                server.kill()
        assert len(tickets.read_text().splitlines()) == 1

        server = _serve(config, port, **{TICKETS_FILE_ENV: str(tickets)})
        engine = create_engine(f"sqlite:///{db}")
        try:
            _wait_until(lambda: _started(server, port), timeout=240, what="the restarted server")

            def answered() -> bool:
                with engine.connect() as conn:
                    return conn.execute(select(Message.id).where(Message.direction == "out",
                                                                 Message.status == "sent")).first() is not None
            _wait_until(answered, timeout=120, what="the answer after restart")
        finally:
            server.terminate()
            server.wait(60)  # a loaded machine stops a server in more than 10 s

        with engine.connect() as conn:
            reply = conn.execute(select(Message.text, Message.tool_calls).where(Message.direction == "out")).one()
            inbound_meta = conn.execute(select(Message.meta).where(Message.direction == "in")).scalar_one()
        engine.dispose()
    assert len(tickets.read_text().splitlines()) == 1  # one ticket, though the model asked for it twice
    assert reply.text == "Ticket T-1 is open for your refund."
    assert [(c["name"], c["result"]["ticket"], c.get("replayed")) for c in reply.tool_calls] == [
        ("create_ticket", "T-1", True)]
    assert "tool_runs" not in (inbound_meta or {})


@pytest.mark.timeout(600)
def test_a_burst_killed_mid_answer_is_answered_once_as_one_question_after_restart(tmp_path):
    """A WhatsApp question typed in three pieces is one turn (gateway/burst.py): killed while the model
    answers it, all three stay pending; after the restart they are answered once, together."""
    from urllib.parse import urlencode

    from twilio.request_validator import RequestValidator

    from tests.fakes.twilio_api import FakeTwilio

    sid, token, public = "AC" + "0123456789abcdef" * 2, "twilio-auth-token-for-tests", "https://gw.example.com"
    twilio = FakeTwilio(account_sid=sid, auth_token=token).start()
    channels = {"web": {}, "whatsapp": {"account_sid": sid, "auth_token": "${WA_TOKEN}", "from_number": "+14155238886",
                                        "public_url": public, "api_base": twilio.base_url}}

    def post(port: int, n: int, text: str) -> None:
        form = {"MessageSid": f"SM{n:032x}", "AccountSid": sid, "From": "whatsapp:+15550001234",
                "To": "whatsapp:+14155238886", "Body": text, "NumMedia": "0", "WaId": "15550001234"}
        signature = RequestValidator(token).compute_signature(public + "/webhooks/acme/whatsapp", form)
        assert httpx.post(f"http://127.0.0.1:{port}/webhooks/acme/whatsapp", content=urlencode(form).encode(),
                          headers={"content-type": "application/x-www-form-urlencoded",
                                   "X-Twilio-Signature": signature}).status_code == 200

    with FakeOpenAI() as fake:
        fake.script("slow", Turn(text="never delivered", delay=60), Turn(text="Your order ships today."),
                    Turn(text="You're welcome."))
        db = tmp_path / "gateway.db"
        config = write_config(tmp_path, database_url=f"sqlite+aiosqlite:///{db}",
                              models=[{"model_name": "slow", "litellm_params": {
                                  "model": "openai/slow", "api_base": fake.base_url, "api_key": "${FAKE_KEY:-sk-fake}", "timeout": 90}}],
                              bots=[{"name": "acme", "model": "slow", "channels": channels}],
                              worker={"lease_seconds": 2, "poll_interval": 0.2, "reply_timeout": 30})
        upgrade(f"sqlite+aiosqlite:///{db}")
        port, engine = free_port(), create_engine(f"sqlite:///{db}")
        try:
            for attempt in ("first", "restarted"):
                server = _serve(config, port, WA_TOKEN=token)
                try:
                    _wait_until(lambda: _started(server, port), timeout=240, what=f"the {attempt} server")
                    if attempt == "first":
                        for n, piece in enumerate(("my order", "is late", "?"), start=1):
                            post(port, n, piece)
                        _wait_until(lambda: len(fake.requests_for("slow")) == 1, timeout=60, what="the model call")
                        server.send_signal(signal.SIGKILL)
                    else:
                        _wait_until(lambda: twilio.delivered, timeout=120, what="the answer after restart")
                        # A later message is answered after every earlier piece: once it is, a second answer
                        # to the burst (or to one of its pieces) would be stored.
                        post(port, 4, "When will it arrive?")
                        _wait_until(lambda: len(twilio.delivered) >= 2, timeout=120, what="the later answer")
                finally:
                    server.kill() if attempt == "first" else server.terminate()
                    server.wait(60)  # a loaded machine stops a server in more than 10 s
            with engine.connect() as conn:
                inbound = conn.execute(select(Message.id, Message.status).where(Message.direction == "in")
                                       .order_by(Message.id)).all()
                replies = conn.execute(select(Message.reply_to_id, Message.status).where(Message.direction == "out")).all()
        finally:
            engine.dispose()
            twilio.stop()
    assert [s for _, s in inbound] == ["done"] * 4
    assert [tuple(r) for r in replies] == [(inbound[0].id, "sent"), (inbound[3].id, "sent")]
    assert len(twilio.delivered) == 2
    asked = [m["content"] for m in fake.requests_for("slow")[1].body["messages"] if m["role"] == "user"]
    assert "my order\nis late\n?" in asked[-1]
