"""A local server that answers as Anthropic's Messages API and Gemini's (Google AI Studio's) streaming endpoint
do, byte for byte, for tests of what the real LiteLLM makes of their failures.

LiteLLM calls it through `model="anthropic/<name>", api_base=fake.base_url` (POST /v1/messages) and
`model="gemini/<name>", api_base=fake.gemini_base` (POST /v1beta/models/<name>:streamGenerateContent?alt=sse).
Each model name has a queue of `Reply`s (whole HTTP answers: a status and a body, an SSE stream included);
every request pops the next one and is recorded with its path.

    fake = FakeProviders().start()
    fake.script("claude", Reply(body=anthropic_stream("Refunds take", error="overloaded_error")))
    fake.script("gemini-x", Reply(status=429, body=GEMINI_RATE_LIMITED, content_type="application/json"))
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


@dataclass(frozen=True)
class Reply:
    """One whole HTTP answer: `body` as it is sent, with `status`, `content_type` and `headers`."""

    body: str
    status: int = 200
    content_type: str = "text/event-stream"
    headers: dict[str, str] = field(default_factory=dict)


def _event(name: str, data: dict) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


def anthropic_stream(text: str, *, error: str | None = None, message: str = "Overloaded") -> str:
    """An Anthropic Messages stream writing `text`, then, with `error` (e.g. "overloaded_error"), the error
    event Anthropic sends when it fails once the stream began (`event: error`, and no message_stop)."""
    frames = [
        _event("message_start", {"type": "message_start", "message": {
            "id": "msg_fake", "type": "message", "role": "assistant", "model": "claude-fake", "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 12, "output_tokens": 1}}}),
        _event("content_block_start", {"type": "content_block_start", "index": 0,
                                       "content_block": {"type": "text", "text": ""}}),
        _event("ping", {"type": "ping"}),
        _event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                       "delta": {"type": "text_delta", "text": text}}),
    ]
    if error is not None:
        frames.append(_event("error", {"type": "error", "error": {"type": error, "message": message}}))
        return "".join(frames)
    frames += [
        _event("content_block_stop", {"type": "content_block_stop", "index": 0}),
        _event("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                 "usage": {"output_tokens": 7}}),
        _event("message_stop", {"type": "message_stop"}),
    ]
    return "".join(frames)


def anthropic_message(text: str) -> Reply:
    """A whole (unstreamed) Anthropic Messages answer writing `text`."""
    return Reply(json.dumps({"id": "msg_fake", "type": "message", "role": "assistant", "model": "claude-fake",
                             "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                             "stop_sequence": None, "usage": {"input_tokens": 12, "output_tokens": 7}}),
                 content_type="application/json")


def gemini_stream(text: str, *, error: tuple[int, str, str] | None = None) -> str:
    """A Gemini `streamGenerateContent?alt=sse` answer writing `text` and stopping, or, with `error` (code,
    status, message), the error chunk Google AI Studio ends a stream with when it fails once it began."""
    chunk = {"candidates": [{"content": {"parts": [{"text": text}], "role": "model"}, "index": 0}],
             "usageMetadata": {"promptTokenCount": 12, "candidatesTokenCount": 7, "totalTokenCount": 19},
             "modelVersion": "gemini-fake"}
    if error is not None:
        code, status, message = error
        ending = {"error": {"code": code, "message": message, "status": status}}
        return f"data: {json.dumps(chunk)}\r\n\r\ndata: {json.dumps(ending)}\r\n\r\n"
    chunk["candidates"][0]["finishReason"] = "STOP"
    return f"data: {json.dumps(chunk)}\r\n\r\n"


def gemini_answer(text: str) -> Reply:
    """A whole (unstreamed, `generateContent`) Gemini answer writing `text`."""
    return Reply(json.dumps({"candidates": [{"content": {"parts": [{"text": text}], "role": "model"},
                                             "finishReason": "STOP", "index": 0}],
                             "usageMetadata": {"promptTokenCount": 12, "candidatesTokenCount": 7,
                                               "totalTokenCount": 19}}), content_type="application/json")


GEMINI_RATE_LIMITED = json.dumps({"error": {
    "code": 429, "message": "Resource has been exhausted (e.g. check quota).", "status": "RESOURCE_EXHAUSTED"}})
"""The body Google AI Studio answers a rate-limited request with, streamed or not."""


class FakeProviders:
    """The server. `start()` binds an ephemeral port on 127.0.0.1."""

    def __init__(self) -> None:
        self._scripts: dict[str, deque[Reply]] = defaultdict(deque)
        self._lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []  # (model, path with query)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port: int | None = None

    def script(self, model: str, *replies: Reply) -> None:
        """Queue `replies` for requests naming `model` (the part after `anthropic/` or `gemini/`)."""
        with self._lock:
            self._scripts[model].extend(replies)

    def requests_for(self, model: str) -> list[str]:
        """The paths (with their query) of the requests for `model`, oldest first."""
        with self._lock:
            return [path for name, path in self.requests if name == model]

    @property
    def base_url(self) -> str:
        """The `api_base` of an `anthropic/` model."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def gemini_base(self) -> str:
        """The `api_base` of a `gemini/` model."""
        return f"http://127.0.0.1:{self.port}/v1beta"

    def start(self) -> "FakeProviders":
        """Serve in a background thread; returns once the port is bound."""
        app = Starlette(routes=[Route("/v1/messages", self._anthropic, methods=["POST"]),
                                Route("/v1beta/models/{action:path}", self._gemini, methods=["POST"])])
        # As `gateway serve` runs it: no handler, propagation or level of its own left on uvicorn's loggers.
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None,
                                                     access_log=False, lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, name="fake-providers", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not (self._server.started and self._server.servers):
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("fake provider server did not start")
            time.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        """Stop at once."""
        if self._server is not None:
            self._server.should_exit = self._server.force_exit = True
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "FakeProviders":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _anthropic(self, request: Request) -> Response:
        return self._answer(str((await request.json()).get("model", "")), request)

    async def _gemini(self, request: Request) -> Response:
        return self._answer(request.path_params["action"].split(":", 1)[0], request)

    def _answer(self, model: str, request: Request) -> Response:
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        with self._lock:
            self.requests.append((model, path))
            reply = self._scripts[model].popleft() if self._scripts[model] else None
        if reply is None:  # loud, and a status no one retries
            return JSONResponse({"error": {"type": "invalid_request_error",
                                           "message": f"fake: no scripted reply left for model {model!r}"}}, 400)
        return Response(reply.body, status_code=reply.status, media_type=reply.content_type, headers=reply.headers)
