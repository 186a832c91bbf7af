"""Query parameters of a configured URL that are credentials in all but name (`?apikey=…`,
`?access_token=${WIKI_TOKEN}`): found to redact them from logs, and taken out of a URL before anyone is
shown it."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

SECRET_QUERY_NAME = re.compile(r"key|token|secret|pass|auth|sig|credential", re.IGNORECASE)
"""A query parameter named like this carries a credential (`apikey`, `access_token`, `X-Amz-Signature`)."""


def query_secrets(url: str) -> list[str]:
    """The values of `url`'s query parameters named like a credential (a `{field}` template's left out)."""
    try:
        query = urlsplit(url or "").query
    except ValueError:
        return []
    return [value for name, value in parse_qsl(query) if SECRET_QUERY_NAME.search(name) and "{" not in value]


def without_query_secrets(url: str) -> str:
    """`url` without its query parameters named like a credential; the others kept, in order. Anything
    else (a URL without any, a directory source's `faq?.md`) is returned as it is."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if parts.scheme.lower() not in ("http", "https"):
        return url
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    kept = [(name, value) for name, value in pairs if not SECRET_QUERY_NAME.search(name)]
    return url if len(kept) == len(pairs) else urlunsplit(parts._replace(query=urlencode(kept)))


def source_url_secrets(settings) -> list[str]:
    """The credentials in the query of every `urls` and `sitemap` source's URL, for log redaction: a page
    that fails is logged, and shown by `/readyz`, by its URL."""
    return [value for bot in settings.bots for source in bot.sources
            for url in [*source.urls, *([source.url] if source.url else [])] for value in query_secrets(url)]
