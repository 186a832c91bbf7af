"""A local fake of Twilio's Messages API, for tests.

The real `twilio` SDK talks to it through `client.api.base_url = fake.base_url`. It speaks the
protocol: `POST /2010-04-01/Accounts/{AccountSid}/Messages.json` with a form body and HTTP Basic
auth, answering 201 with a message resource, or Twilio's JSON error body. Every request is
recorded; replies can be scripted (429 with `Retry-After`, 5xx, error 63016 outside the WhatsApp
window...) and are consumed in order, after which requests succeed. A Body over 1,600 UTF-16 units is
refused with 21617, as Twilio does. `GET …/Messages.json?To=&From=&PageSize=` lists the messages
created, newest first, as Twilio's list does; `fail_lists` answers that many lists with a 500.
`GET /2010-04-01/Accounts/{AccountSid}.json` (the Account fetch a channel checks its credentials with at start)
answers the account, 401 (20003) to wrong credentials, or the next scripted reply; it is recorded in
`account_fetches`, not in `requests`.

    fake = FakeTwilio(account_sid="AC...", auth_token="...").start()
    fake.script(Reply(status=429, code=20429, retry_after=0))
    ...
    assert len(fake.delivered) == 1
    fake.stop()

It runs a stdlib threading HTTP server, so it is independent of the test's event loop.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timezone
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl

BODY_LIMIT = 1600
"""Twilio refuses a longer Body (21617). Counted in UTF-16 units: an emoji counts twice."""
_MESSAGES = re.compile(r"^/2010-04-01/Accounts/(?P<sid>[^/]+)/Messages\.json$")
_ACCOUNT = re.compile(r"^/2010-04-01/Accounts/(?P<sid>[^/]+)\.json$")


@dataclass(frozen=True)
class Reply:
    """A scripted answer: an error status with a Twilio error code, optionally `Retry-After`.

    `drop=True` accepts the message (it counts as delivered) and then closes the connection without
    answering, as a timeout after Twilio processed the request looks to the client. `created=True`
    with an error status creates the message and still answers the error (a 500 after the fact).
    `sid` fixes the SID the accepted message gets (default: a random one). `delay` holds the answer this
    many seconds after the message is created: Twilio taking it, then not answering in time.
    """

    status: int = 201
    code: int | None = None
    message: str = ""
    retry_after: float | None = None
    drop: bool = False
    created: bool = False
    sid: str | None = None
    delay: float = 0.0


@dataclass
class RecordedRequest:
    """One request the fake received."""

    method: str
    path: str
    headers: dict[str, str]
    form: dict[str, str]
    authorized: bool
    status: int = 0
    sid: str | None = None
    created_at: datetime | None = None


@dataclass
class _State:
    account_sid: str
    auth_token: str
    replies: deque[Reply] = field(default_factory=deque)
    requests: list[RecordedRequest] = field(default_factory=list)
    messages: list[RecordedRequest] = field(default_factory=list)
    accounts: list[RecordedRequest] = field(default_factory=list)
    fail_lists: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class FakeTwilio:
    """The fake server; `start()` binds 127.0.0.1 on an ephemeral port."""

    def __init__(self, *, account_sid: str, auth_token: str) -> None:
        self.state = _State(account_sid, auth_token)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> "FakeTwilio":
        """Serve in a background thread."""
        state = self.state

        class Handler(_Handler):
            pass

        Handler.state = state
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Shut the server down."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def base_url(self) -> str:
        """What `api_base` should be set to."""
        assert self._server is not None, "start() first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def script(self, *replies: Reply) -> None:
        """Queue replies for the next requests, in order."""
        with self.state.lock:
            self.state.replies.extend(replies)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received, in order."""
        with self.state.lock:
            return list(self.state.requests)

    @property
    def account_fetches(self) -> list[RecordedRequest]:
        """The Account fetches (`GET /2010-04-01/Accounts/{sid}.json`) received, in order."""
        with self.state.lock:
            return list(self.state.accounts)

    @property
    def delivered(self) -> list[RecordedRequest]:
        """The requests that created a message (answered 201, or an error after creating it)."""
        with self.state.lock:
            return list(self.state.messages)

    @property
    def lists(self) -> list[RecordedRequest]:
        """The list requests (GET) received."""
        return [r for r in self.requests if r.method == "GET"]

    def fail_lists(self, count: int) -> None:
        """Answer the next `count` list requests with a 500."""
        with self.state.lock:
            self.state.fail_lists = count

    def seed(self, *, to: str, from_: str, body: str, created_at: datetime) -> None:
        """A message created earlier, outside any request of the test (it shows in lists)."""
        record = RecordedRequest("POST", "", {}, {"To": to, "From": from_, "Body": body}, True, 201,
                                 "SM" + uuid.uuid4().hex, created_at)
        with self.state.lock:
            self.state.messages.append(record)


class _Handler(BaseHTTPRequestHandler):
    state: _State

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass  # keep test output quiet

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode("utf-8")
        form = dict(parse_qsl(body, keep_blank_values=True))
        record = RecordedRequest(
            method="POST",
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            form=form,
            authorized=self._authorized(),
        )
        with self.state.lock:
            self.state.requests.append(record)
            reply = self.state.replies.popleft() if self.state.replies else Reply()
        match = _MESSAGES.match(self.path.split("?", 1)[0])
        if match is None:
            return self._error(record, Reply(status=404, code=20404, message="The requested resource was not found"))
        if not record.authorized or match.group("sid") != self.state.account_sid:
            return self._error(record, Reply(status=401, code=20003, message="Authenticate"))
        if "To" not in form or not ({"Body", "ContentSid", "MediaUrl"} & form.keys()):
            return self._error(record, Reply(status=400, code=21602, message="Message body is required."))
        if len(form.get("Body", "").encode("utf-16-le")) // 2 > BODY_LIMIT:
            return self._error(record, Reply(status=400, code=21617,
                                             message="The concatenated message body exceeds the 1600 character limit."))
        if reply.status >= 300 and not reply.created:
            return self._error(record, reply)
        record.sid = reply.sid or "SM" + uuid.uuid4().hex
        record.status = 201
        record.created_at = datetime.now(timezone.utc)
        with self.state.lock:
            self.state.messages.append(record)
        if reply.status >= 300:
            return self._error(record, reply)
        if reply.drop:
            self.close_connection = True
            return
        time.sleep(reply.delay)
        self._json(201, self._resource(record))

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        path, _, query = self.path.partition("?")
        params = dict(parse_qsl(query, keep_blank_values=True))
        record = RecordedRequest("GET", self.path, {k.lower(): v for k, v in self.headers.items()}, params,
                                 self._authorized())
        if (account := _ACCOUNT.match(path)) is not None:
            return self._account(record, account.group("sid"))
        with self.state.lock:
            self.state.requests.append(record)
            failing, self.state.fail_lists = self.state.fail_lists > 0, max(0, self.state.fail_lists - 1)
            created = list(self.state.messages)
        match = _MESSAGES.match(path)
        if match is None:
            return self._error(record, Reply(status=404, code=20404, message="The requested resource was not found"))
        if not record.authorized or match.group("sid") != self.state.account_sid:
            return self._error(record, Reply(status=401, code=20003, message="Authenticate"))
        if failing:
            return self._error(record, Reply(status=500, code=20500, message="Internal Server Error"))
        record.status = 200
        found = [m for m in reversed(created)
                 if params.get("To", m.form["To"]) == m.form["To"] and params.get("From", m.form.get("From")) == m.form.get("From")]
        size = int(params.get("PageSize") or 50)
        uri = f"/2010-04-01/Accounts/{self.state.account_sid}/Messages.json?PageSize={size}&Page=0"
        self._json(200, {"messages": [self._resource(m) for m in found[:size]], "end": min(size, len(found)) - 1,
                         "first_page_uri": uri, "next_page_uri": None, "page": 0, "page_size": size,
                         "previous_page_uri": None, "start": 0, "uri": uri})

    def _account(self, record: RecordedRequest, sid: str) -> None:
        """The Account resource, as Twilio answers its fetch: the cheapest call that proves the credentials."""
        with self.state.lock:
            self.state.accounts.append(record)
            reply = self.state.replies.popleft() if self.state.replies else Reply()
        if not record.authorized or sid != self.state.account_sid:
            return self._error(record, Reply(status=401, code=20003, message="Authenticate"))
        if reply.status >= 300:
            return self._error(record, reply)
        record.status = 200
        self._json(200, {"sid": sid, "friendly_name": "Fake account", "status": "active", "type": "Full",
                         "owner_account_sid": sid, "auth_token": self.state.auth_token,
                         "date_created": format_datetime(datetime.now(timezone.utc), usegmt=True),
                         "date_updated": format_datetime(datetime.now(timezone.utc), usegmt=True),
                         "uri": f"/2010-04-01/Accounts/{sid}.json"})

    def _resource(self, record: RecordedRequest) -> dict[str, object]:
        created = format_datetime(record.created_at or datetime.now(timezone.utc), usegmt=True)
        return {
            "sid": record.sid,
            "account_sid": self.state.account_sid,
            "to": record.form["To"],
            "from": record.form.get("From"),
            "body": record.form.get("Body", ""),
            "status": "queued",
            "num_segments": "1",
            "num_media": "0",
            "direction": "outbound-api",
            "api_version": "2010-04-01",
            "date_created": created,
            "date_updated": created,
            "date_sent": None,
            "error_code": None,
            "error_message": None,
            "uri": f"/2010-04-01/Accounts/{self.state.account_sid}/Messages/{record.sid}.json",
        }

    def _authorized(self) -> bool:
        header = self.headers.get("Authorization", "")
        if not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except ValueError:
            return False
        return user == self.state.account_sid and password == self.state.auth_token

    def _error(self, record: RecordedRequest, reply: Reply) -> None:
        record.status = reply.status
        headers = {"Retry-After": f"{reply.retry_after:g}"} if reply.retry_after is not None else {}
        self._json(reply.status, {
            "code": reply.code,
            "message": reply.message or f"error {reply.code}",
            "more_info": f"https://www.twilio.com/docs/errors/{reply.code}",
            "status": reply.status,
        }, headers)

    def _json(self, status: int, payload: dict[str, object], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)
