"""A local OpenAI-compatible chat server with scripted turns (and an embeddings endpoint), for tests.

The real LiteLLM (and the real OpenAI SDK under it) talks to it through
`model="openai/<name>", api_base=fake.base_url`. Each model name has a queue of `Turn`s; every
request pops the next one. A turn can answer with text or tool calls (as JSON or as an SSE stream),
fail with an HTTP status, wait before answering (to trigger client timeouts), drop the connection
mid-stream, or end a stream without a `finish_reason`. Every request is recorded, so a test asserts
on what the model actually saw.

    fake = FakeOpenAI().start()
    fake.script("primary", Turn(status=429), Turn(text="Hello [1]"))
    ...
    fake.requests_for("primary")[0].body["messages"]
    fake.stop()

The server runs uvicorn in its own thread and event loop, so it is independent of the test's loop.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import struct
import threading
import time
import uuid
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


@dataclass(frozen=True)
class ToolCallSpec:
    """A tool call the fake model makes: `arguments` is serialized to JSON for the wire (a string is sent
    as it is: a model's truncated or malformed arguments). Streamed as OpenAI streams it: its id and
    name first, then its arguments in two pieces, under `stream_index` (default: its position; Ollama
    sends 0 for every call of a parallel batch)."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    id: str = ""
    stream_index: int | None = None


@dataclass(frozen=True)
class Turn:
    """One scripted reply.

    - `text` / `tool_calls`: the answer (finish_reason "stop" or "tool_calls").
    - `status`: answer with this HTTP error instead (429, 500, 503, 401...). `retry_after` sets the header,
      `error` the message.
    - `delay`: seconds to wait before answering; longer than the client's timeout means a timeout.
    - `break_after`: streaming only; drop the connection after this many content chunks.
    - `chunk_delay`: streaming only; seconds between two content chunks (a slow provider mid-answer).
    - `stall`: streaming only; seconds of silence after the first chunk (a reasoning model thinking).
    - `omit_finish_reason`: streaming only; end with `[DONE]` but never send a finish_reason.
    - `stream_error`: streaming only; after the text's first `break_after` words (all without it), send this
      error event (`data: {"error": …}`) and end, as OpenAI reports a failure once its stream began.
    - `finish_reason`: send this one instead ("content_filter": the provider's filter refused).
    - `usage`: (prompt_tokens, completion_tokens); omitted from the reply when None.
    - `raw_body`: answer HTTP 200 with exactly this body (`raw_type`), stream or not: a proxy's HTML
      error page, an empty body.
    """

    text: str | None = None
    tool_calls: tuple[ToolCallSpec, ...] = ()
    status: int | None = None
    error: str | None = None
    retry_after: float | None = None
    delay: float = 0.0
    break_after: int | None = None
    chunk_delay: float = 0.0
    stall: float = 0.0
    omit_finish_reason: bool = False
    stream_error: dict[str, Any] | None = None
    finish_reason: str | None = None
    usage: tuple[int, int] | None = (12, 7)
    raw_body: str | None = None
    raw_type: str = "text/html"


@dataclass(frozen=True)
class RecordedRequest:
    """What a client sent to /v1/chat/completions."""

    model: str
    body: dict[str, Any]
    headers: dict[str, str]
    at: float

    @property
    def stream(self) -> bool:
        """Whether the client asked for SSE."""
        return bool(self.body.get("stream"))

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The chat messages as the model saw them."""
        return list(self.body.get("messages", []))


class _StreamBroken(Exception):
    """Raised inside the SSE body so uvicorn aborts the connection mid-response."""


class FakeOpenAI:
    """The server. `start()` binds an ephemeral port on 127.0.0.1; `base_url` ends in `/v1`."""

    def __init__(self) -> None:
        self._scripts: dict[str, deque[Turn]] = defaultdict(deque)
        self._lock = threading.Lock()
        self.requests: list[RecordedRequest] = []
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port: int | None = None

    # -- scripting and inspection -------------------------------------------------------------

    def script(self, model: str, *turns: Turn) -> None:
        """Queue `turns` for requests naming `model` (the part after `openai/`)."""
        with self._lock:
            self._scripts[model].extend(turns)

    def remaining(self, model: str) -> int:
        """Scripted turns not consumed yet."""
        with self._lock:
            return len(self._scripts[model])

    def requests_for(self, model: str) -> list[RecordedRequest]:
        """Recorded requests for one model, oldest first."""
        with self._lock:
            return [r for r in self.requests if r.model == model]

    def reset(self) -> None:
        """Forget scripts and recorded requests."""
        with self._lock:
            self._scripts.clear()
            self.requests.clear()

    @property
    def base_url(self) -> str:
        """The `api_base` to give LiteLLM."""
        if self.port is None:
            raise RuntimeError("FakeOpenAI is not started")
        return f"http://127.0.0.1:{self.port}/v1"

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> "FakeOpenAI":
        """Serve in a background thread; returns once the port is bound."""
        app = Starlette(routes=[
            Route("/v1/chat/completions", self._chat, methods=["POST"]),
            Route("/v1/embeddings", self._embeddings, methods=["POST"]),
        ])
        # As `gateway serve` runs it (log_config=None, access_log=False): uvicorn's default log_config and a
        # log_level gave its loggers a handler of their own, no propagation and a level, for the tests after too.
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="fake-openai", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not (self._server.started and self._server.servers):
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("fake OpenAI server did not start")
            time.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        """Stop at once, abandoning any delayed reply."""
        if self._server is not None:
            self._server.should_exit = True
            self._server.force_exit = True
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "FakeOpenAI":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the endpoint ------------------------------------------------------------------------

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        model = str(body.get("model", ""))
        with self._lock:
            self.requests.append(RecordedRequest(model, body, dict(request.headers), time.monotonic()))
            turn = self._scripts[model].popleft() if self._scripts[model] else None
        if turn is None:
            # Loud, and a status LiteLLM does not retry, so a missing script cannot hide behind retries.
            return _error(400, f"fake: no scripted turn left for model {model!r}", "invalid_request_error")
        if turn.delay:
            await asyncio.sleep(turn.delay)
        if turn.status is not None:
            headers = {"retry-after": str(turn.retry_after)} if turn.retry_after is not None else {}
            return _error(turn.status, turn.error or f"fake: scripted HTTP {turn.status}", "server_error", headers)
        if turn.raw_body is not None:
            return Response(turn.raw_body, media_type=turn.raw_type)
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamingResponse(_sse(model, turn, include_usage), media_type="text/event-stream")
        return JSONResponse(_completion(model, turn))


    async def _embeddings(self, request: Request) -> Response:
        """Unscripted: every input gets `embedding_vector(text)`, as floats or base64 float32 (the
        OpenAI SDK asks for base64 unless told otherwise)."""
        body = await request.json()
        model = str(body.get("model", ""))
        with self._lock:
            self.requests.append(RecordedRequest(model, body, dict(request.headers), time.monotonic()))
        inputs = body.get("input")
        inputs = [inputs] if isinstance(inputs, str) else list(inputs or [])
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        for i, text in enumerate(inputs):
            vector = embedding_vector(str(text))
            encoded: Any = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode() if as_base64 else vector
            data.append({"object": "embedding", "index": i, "embedding": encoded})
        tokens = sum(len(str(t).split()) for t in inputs)
        return JSONResponse({"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})


EMBEDDING_DIM = 48


def embedding_vector(text: str) -> list[float]:
    """A deterministic bag-of-words vector (each lower-cased word hashed to a dimension), deliberately
    NOT unit length, so a client that assumes unit vectors is caught."""
    vector = [0.0] * EMBEDDING_DIM
    for word in text.lower().split():
        word = word.strip(".,;:!?()[]\"'")
        if word:
            vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % EMBEDDING_DIM] += 3.0
    if not any(vector):
        vector[0] = 3.0
    return vector


def _error(status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> JSONResponse:
    payload = {"error": {"message": message, "type": kind, "param": None, "code": str(status)}}
    return JSONResponse(payload, status_code=status, headers=headers)


def _tool_calls(turn: Turn) -> list[dict[str, Any]]:
    return [
        {
            "id": call.id or f"call_{i}_{uuid.uuid4().hex[:8]}",
            "type": "function",
            "function": {"name": call.name,
                         "arguments": call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)},
        }
        for i, call in enumerate(turn.tool_calls)
    ]


def _usage(turn: Turn) -> dict[str, int] | None:
    if turn.usage is None:
        return None
    prompt, completion = turn.usage
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _completion(model: str, turn: Turn) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": turn.text}
    if turn.tool_calls:
        message["tool_calls"] = _tool_calls(turn)
    out: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message,
                     "finish_reason": turn.finish_reason or ("tool_calls" if turn.tool_calls else "stop")}],
    }
    if (usage := _usage(turn)) is not None:
        out["usage"] = usage
    return out


async def _sse(model: str, turn: Turn, include_usage: bool):
    ident = f"chatcmpl-{uuid.uuid4().hex[:12]}"

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        payload = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }
        return f"data: {json.dumps(payload)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    await asyncio.sleep(turn.stall)
    words = (turn.text or "").split(" ") if turn.text else []
    for i, word in enumerate(words):
        if turn.break_after is not None and i >= turn.break_after:
            if turn.stream_error is not None:  # reported in the stream, not by a dropped connection
                break
            # Let the sent bytes reach the client before the connection is torn down.
            await asyncio.sleep(0.05)
            raise _StreamBroken("fake: stream broken on purpose")
        yield chunk({"content": word if i == 0 else " " + word})
        await asyncio.sleep(turn.chunk_delay)
    if turn.stream_error is not None:
        yield f"data: {json.dumps({'error': turn.stream_error})}\n\n"
        return
    for i, (spec, call) in enumerate(zip(turn.tool_calls, _tool_calls(turn))):
        index = i if spec.stream_index is None else spec.stream_index
        arguments = call["function"]["arguments"]
        half = len(arguments) // 2
        yield chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                     "function": {"name": call["function"]["name"], "arguments": ""}}]})
        for piece in (arguments[:half], arguments[half:]):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    if turn.omit_finish_reason:
        yield "data: [DONE]\n\n"
        return
    yield chunk({}, turn.finish_reason or ("tool_calls" if turn.tool_calls else "stop"))
    if include_usage and (usage := _usage(turn)) is not None:
        payload = {"id": ident, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                   "choices": [], "usage": usage}
        yield f"data: {json.dumps(payload)}\n\n"
    yield "data: [DONE]\n\n"


def model_entry(fake: "FakeOpenAI", name: str, *, api_key: str = "${FAKE_OPENAI_KEY:-sk-fake}",
                **params: Any) -> dict[str, Any]:
    """A config.yaml `models:` entry that sends `name` to the fake through the real LiteLLM client.

    The key is an environment reference because config loading refuses literal secrets.
    """
    return {"model_name": name, "litellm_params": {"model": f"openai/{name}", "api_base": fake.base_url,
                                                   "api_key": api_key, **params}}
