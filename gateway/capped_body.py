"""Reading an HTTP response's body without letting its sender choose how much memory it takes.

Used by every fetch whose server the gateway does not control: ingest's pages, sitemaps and robots.txt
(`rag.crawl`) and an http tool's answer (`gateway.pipeline.tools`)."""

from __future__ import annotations

import httpx

from gateway.errors import GatewayError


class BodyTooLarge(GatewayError):
    """A response body refused unread or part read: larger than its cap, or compressed more than once.
    Its text finishes a sentence about the body (`is larger than 4 MB`)."""


def megabytes(size: int) -> str:
    """`20 MB`, `1.5 MB`: a byte count as an error message says it."""
    return f"{size / (1024 * 1024):g} MB"


async def read_capped(response: httpx.Response, max_bytes: int) -> bytes:
    """The body of `response` (sent with `stream=True`), decoded, or `BodyTooLarge` once it passes
    `max_bytes`, or before a byte is read when it is compressed more than once."""
    encodings = [e for e in response.headers.get_list("content-encoding", split_commas=True)
                 if e.strip().lower() not in ("", "identity")]
    if len(encodings) > 1:
        # httpx inflates every layer of a received piece whole before the cap below sees a byte of it: a 64 kB
        # piece gzipped once is at most about 64 MB, but gzipped twice 700 bytes were 400 MB. No server needs two.
        raise BodyTooLarge(f"is compressed more than once (Content-Encoding: {', '.join(encodings)})")
    chunks, size = [], 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > max_bytes:
            raise BodyTooLarge(f"is larger than {megabytes(max_bytes)}")
        chunks.append(chunk)
    return b"".join(chunks)
