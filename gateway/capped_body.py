"""Reading an HTTP response's body without letting its sender choose how much memory it takes.

Used by every fetch whose server the gateway does not control: ingest's pages, sitemaps and robots.txt
(`rag.crawl`) and an http tool's answer (`gateway.pipeline.tools`)."""

from __future__ import annotations

import zlib

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
    if encodings and encodings[0].strip().lower() in _ZLIB_ENCODINGS:
        return await _inflated(response, max_bytes, _ZLIB_ENCODINGS[encodings[0].strip().lower()])
    chunks, size = [], 0
    async for chunk in response.aiter_bytes():  # br, zstd: decoded by httpx, a received piece at a time
        size += len(chunk)
        if size > max_bytes:
            raise BodyTooLarge(f"is larger than {megabytes(max_bytes)}")
        chunks.append(chunk)
    return b"".join(chunks)


_ZLIB_ENCODINGS = {"gzip": zlib.MAX_WBITS | 16, "x-gzip": zlib.MAX_WBITS | 16, "deflate": zlib.MAX_WBITS}
"""The zlib window bits of each encoding inflated here (a `deflate` body without its zlib header is read as raw)."""


async def _inflated(response: httpx.Response, max_bytes: int, wbits: int) -> bytes:
    """A gzip or deflate body inflated at most `max_bytes` (+1) at a time. Why not httpx's: it inflates each
    received piece whole, and 64 kB of gzipped zeros are 64 MB (a 1 MB answer held 145 MB before the cap)."""
    inflater, first = zlib.decompressobj(wbits), True
    chunks, size = [], 0
    try:
        async for raw in response.aiter_raw():
            if first and raw and wbits == zlib.MAX_WBITS and not _zlib_header(raw):
                inflater = zlib.decompressobj(-zlib.MAX_WBITS)  # `deflate` sent raw, as some servers do
            first = first and not raw
            while raw:
                piece = inflater.decompress(raw, max_bytes - size + 1)
                size += len(piece)
                if size > max_bytes:
                    raise BodyTooLarge(f"is larger than {megabytes(max_bytes)}")
                chunks.append(piece)
                raw = inflater.unconsumed_tail
        chunks.append(inflater.flush())
    except zlib.error as exc:
        raise httpx.DecodingError(str(exc), request=response.request) from exc
    if size + len(chunks[-1]) > max_bytes:
        raise BodyTooLarge(f"is larger than {megabytes(max_bytes)}")
    return b"".join(chunks)


def _zlib_header(data: bytes) -> bool:
    """Whether `data` starts with a zlib header (RFC 1950: deflate, and a checksum of the two bytes)."""
    return len(data) >= 2 and data[0] & 0x0F == 8 and ((data[0] << 8) | data[1]) % 31 == 0
