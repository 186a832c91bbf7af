"""Helpers for the streaming tests: a model fake that streams slowly, and a replay of what a chat showed."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from tests.fakes.openai_server import FakeOpenAI, RecordedRequest
from tests.fakes.telegram_api import FakeTelegramAPI, parse_telegram_html


class SlowStreamOpenAI(FakeOpenAI):
    """The scripted OpenAI fake, but a streamed reply waits `word_delay` seconds between words.

    The shared fake streams as fast as it can, so an edit-streamer would see the whole answer at once;
    real models take seconds, which is what streaming by edits is for.
    """

    def __init__(self, *, word_delay: float = 0.01) -> None:
        super().__init__()
        self.word_delay = word_delay

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        if not body.get("stream"):
            return await super()._chat(request)
        model = str(body.get("model", ""))
        with self._lock:
            self.requests.append(RecordedRequest(model, body, dict(request.headers), time.monotonic()))
            turn = self._scripts[model].popleft() if self._scripts[model] else None
        if turn is None or turn.text is None:
            return Response(json.dumps({"error": {"message": f"fake: no streamed turn for {model!r}"}}),
                            status_code=400, media_type="application/json")
        return StreamingResponse(self._slow_sse(model, turn.text), media_type="text/event-stream")

    async def _slow_sse(self, model: str, text: str):
        ident = f"chatcmpl-{uuid.uuid4().hex[:12]}"

        def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
            payload = {"id": ident, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            return f"data: {json.dumps(payload)}\n\n"

        yield chunk({"role": "assistant", "content": ""})
        for i, word in enumerate(text.split(" ")):
            yield chunk({"content": word if i == 0 else " " + word})
            await asyncio.sleep(self.word_delay)
        yield chunk({}, "stop")
        yield "data: [DONE]\n\n"


def telegram_timeline(fake: FakeTelegramAPI, chat: int) -> list[dict[int, str]]:
    """What the chat showed after each sendMessage/editMessageText call to it: message id → visible text.

    Replays the recorded calls (every call in these tests succeeds, so the n-th sendMessage is the n-th
    message the fake stored)."""
    sent = iter(m for m in fake.sent if m.chat_id == chat)
    state: dict[int, str] = {}
    states: list[dict[int, str]] = []
    for call in fake.requests:
        if str(call.params.get("chat_id")) != str(chat):
            continue
        if call.method.lower() == "sendmessage":
            state[next(sent).message_id] = _visible(call.params)
        elif call.method.lower() == "editmessagetext":
            state[int(call.params["message_id"])] = _visible(call.params)
        else:
            continue
        states.append(dict(state))
    return states


def _visible(params: dict[str, Any]) -> str:
    text = str(params.get("text", ""))
    return parse_telegram_html(text)[0] if str(params.get("parse_mode", "")).lower() == "html" else text


def numbered_words(count: int, *, paragraph_every: int = 40) -> list[str]:
    """`w0000 w0001 ...` as tokens (each with its leading space), a blank line every few words."""
    tokens = []
    for i in range(count):
        sep = "" if i == 0 else "\n\n" if i % paragraph_every == 0 else " "
        tokens.append(f"{sep}w{i:04d}")
    return tokens


def words(text: str) -> list[str]:
    """The numbered words in a text, in order."""
    return re.findall(r"\bw\d{4}\b", text)


def shown_twice(state: dict[int, str]) -> set[str]:
    """Numbered words (unique by construction) that appear more than once at the same moment."""
    seen: set[str] = set()
    twice: set[str] = set()
    for text in state.values():
        for word in words(text):
            if word in seen:
                twice.add(word)
            seen.add(word)
    return twice
