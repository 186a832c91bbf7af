"""Configured values that are credentials in all but name, found by their names read word by word: a
configured URL's query parameters (`?apikey=…`, `?access_token=${WIKI_TOKEN}`) and its userinfo
(`https://user:password@wiki/…`), found to redact them from logs and taken out of a URL before anyone is
shown it (a model's `api_base`, by its `origin` alone, its credentials redacted as well); and a model's provider
credentials besides `api_key` (`aws_secret_access_key`, `vertex_credentials`, … in its `litellm_params`), found to
redact them."""

from __future__ import annotations

import json
import os
import re
from urllib.parse import SplitResult, parse_qsl, unquote, unquote_plus, urlencode, urlsplit, urlunsplit

REDACTED = "[REDACTED]"  # what a secret is replaced with wherever one is printed or logged
_CREDENTIAL_WORDS = frozenset({"token", "secret", "password", "passwd", "pwd", "pass", "sig", "signature",
                               "credential", "credentials", "auth", "authorization", "apikey", "sas"})
_KEY_OWNERS = frozenset({"api", "access", "private", "secret", "subscription", "license", "client", "app",
                         "auth", "master", "signing", "sas"})


def is_credential_name(name: str) -> bool:
    """Whether a query parameter named `name` carries a credential (`apikey`, `api_key`, `access_token`,
    `X-Amz-Signature`, Azure's `sig`, a bare `key`), read word by word: `spaceKey`, `author`, `keyword`
    and `passage` are not (a substring match took them, and a citation lost the page it named)."""
    words = [w.lower() for w in re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", name)]
    if any(word in _CREDENTIAL_WORDS for word in words):
        return True
    return bool(words) and words[-1] == "key" and (len(words) == 1 or words[-2] in _KEY_OWNERS)


def query_secrets(url: str) -> list[str]:
    """The values of `url`'s query parameters named like a credential (a `{field}` template's left out)."""
    try:
        query = urlsplit(url or "").query
    except ValueError:
        return []
    return [value for name, value in parse_qsl(query) if is_credential_name(name) and "{" not in value]


def userinfo_secret(url: str) -> str | None:
    """The credential in `url`'s userinfo, as written: the password of `user:password@`, or the user of
    `token@` (a token given alone as HTTP Basic's user)."""
    try:
        parts = urlsplit(url or "")
        user, password = parts.username, parts.password
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or "@" not in parts.netloc:
        return None
    return password or user or None


def url_credentials(url: str) -> list[str]:
    """The credentials `url` carries, for log redaction: its query's (`query_secrets`), also as written when
    that differs (`a+b%2Fc`, which decodes to `a b/c`: a line quotes the URL as written), and its userinfo's."""
    written = [value for name, _, value in _query_pairs(url) if value and _is_written_secret(name, value)]
    decoded = query_secrets(url)
    return [*decoded, *(value for value in written if value not in decoded), *filter(None, [userinfo_secret(url)])]


def _is_written_secret(name: str, value: str) -> bool:
    """Whether a query parameter, as written (`name` not decoded), holds a credential: named like one, and no
    `{field}` template (a source's URL fills it per page)."""
    return is_credential_name(unquote_plus(name)) and "{" not in value


def _query_pairs(url: str) -> list[tuple[str, str, str]]:
    """`url`'s query as written, `(name, "=", value)` a parameter, nothing decoded."""
    try:
        query = urlsplit(url or "").query
    except ValueError:
        return []
    return [pair.partition("=") for pair in query.split("&")] if query else []


def _http_url(url: str) -> SplitResult | None:
    """`url` split, when it is an http(s) URL; None for anything else (a directory source's `faq?.md`)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    return parts if parts.scheme.lower() in ("http", "https") else None


def without_url_secrets(url: str) -> str:
    """`url` as it may be shown: without its userinfo (`user:password@`, `token@`) and its query parameters
    named like a credential, the others kept, in order. Anything else (a URL without any, a directory
    source's `faq?.md`) is returned as it is."""
    if (parts := _http_url(url)) is None:
        return url
    changed = "@" in parts.netloc
    if changed:  # the host and port as written, after the userinfo's last `@`
        parts = parts._replace(netloc=parts.netloc.rsplit("@", 1)[1])
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    kept = [(name, value) for name, value in pairs if not is_credential_name(name)]
    if len(kept) != len(pairs):
        parts, changed = parts._replace(query=urlencode(kept)), True
    return urlunsplit(parts) if changed else url


def masked_url(url: str) -> str:
    """`url` with each credential it carries replaced by `[REDACTED]` where it is written: its userinfo's (the
    password of `user:password@`, the key of `key@` or `key:@`) and its query's values named like one (a
    `{field}` template's kept), read as written, so none is left whatever its encoding (`%2B`, a `+` that
    decoding reads as a space). Anything but an http(s) URL is returned as it is."""
    if (parts := _http_url(url)) is None:
        return url
    netloc, query = parts.netloc, parts.query
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user, colon, password = userinfo.partition(":")
        netloc = f"{user}:{REDACTED}@{host}" if password else f"{REDACTED}{colon}@{host}"
    if query:
        query = "&".join(f"{name}={REDACTED}" if sep and _is_written_secret(name, value) else name + sep + value
                         for name, sep, value in _query_pairs(url))
    if (netloc, query) == (parts.netloc, parts.query):
        return url
    return urlunsplit(parts._replace(netloc=netloc, query=query))


_SERVICE_SECRETS = frozenset({"password", "sslpassword"})  # libpq's and redis-py's query options that are one


def redacted_url(url: str) -> str:
    """A database, Redis or Qdrant URL as `db upgrade`, an error line or a log line shows it: the password of its
    userinfo (`user:password@`, Redis' `:password@`) and its query's credentials (`?password=`, libpq's
    `sslpassword=`, `?api_key=`) as `[REDACTED]`, as the log's redaction masks any other URL; the rest as written."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    netloc, query = parts.netloc, parts.query
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user, colon, password = userinfo.partition(":")
        netloc = f"{user}:{REDACTED}@{host}" if password else netloc
    if query:
        query = "&".join(f"{name}={REDACTED}" if sep and value and (unquote_plus(name).lower() in _SERVICE_SECRETS
                                                                     or _is_written_secret(name, value))
                         else name + sep + value for name, sep, value in _query_pairs(url))
    if (netloc, query) == (parts.netloc, parts.query):
        return url
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def origin(url: str) -> str | None:
    """`url`'s scheme, host and port alone (`https://api.example.com:443`, the scheme's port when it names
    none), as a URL whose userinfo, path or query may carry a credential is shown; None when it is no
    http(s) URL with a host."""
    try:
        parts = urlsplit((url or "").strip())
        host, port = parts.hostname, parts.port
    except ValueError:  # a port that is no number
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not host:
        return None
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port or (443 if scheme == 'https' else 80)}"


def source_url_secrets(settings) -> list[str]:
    """The credentials in every `urls` and `sitemap` source's URL (its userinfo's and its query's), for log
    redaction: a page that fails is logged, and shown by `/readyz`, by its URL."""
    return [value for bot in settings.bots for source in bot.sources
            for url in [*source.urls, *([source.url] if source.url else [])]
            for value in url_credentials(url)]


def credential_values(params: dict) -> list[str]:
    """The values of `params`' keys named like a credential (`aws_secret_access_key`, `aws_session_token`,
    `azure_ad_token`, `client_secret`, `vertex_credentials`), and of such keys in a mapping under one (a
    service account's `private_key`); for a URL (a token endpoint's), only what it carries in its query.
    Not a number (`input_cost_per_token: 0.000002`), nor `aws_access_key_id`, `aws_region_name`, `tenant_id`."""
    found: list[str] = []
    for name, value in params.items():
        if isinstance(value, dict):
            found += credential_values(value)
        elif isinstance(value, str) and is_credential_name(str(name)):
            if value.startswith(("http://", "https://")):
                found += query_secrets(value)
                continue
            # The credential after a scheme (`Bearer KEY`) is quoted alone too, and so is a key inside a JSON
            # credential (a service account's `private_key` in `vertex_credentials`).
            found.append(value)
            if (inner := _json_object(value)) is not None:
                found += credential_values(inner)
            elif " " in value.strip():
                found.append(value.split()[-1])
    return found


def _json_object(text: str) -> dict | None:
    """`text` read as a JSON object, else None."""
    if not text.lstrip().startswith("{"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def model_secrets(settings) -> list[str]:
    """The provider credentials in every model's `litellm_params` and in its `api_base`'s userinfo and query,
    for log redaction: a provider's error (LiteLLM's text, which /readyz shows for a refused model) may quote
    what it was sent."""
    return [value for entry in settings.models
            for value in [*credential_values(entry.litellm_params), *_api_base_secrets(entry.litellm_params)]]


def _api_base_secrets(params: dict) -> list[str]:
    """The credentials in a model's `api_base` (a proxy's `user:password@`, `?api-key=`), read from VAR when
    it is written `os.environ/VAR`, LiteLLM's convention."""
    base = params.get("api_base") or params.get("base_url")
    if isinstance(base, str) and base.startswith("os.environ/"):
        base = os.environ.get(base.removeprefix("os.environ/"))
    return url_credentials(base) if isinstance(base, str) else []


def connection_secrets(settings) -> list[str]:
    """The passwords in `database_url` and `redis_url`, for log redaction: their userinfo's and their query's
    (`?password=`, `?sslpassword=` for a client key), each as written and decoded (`p%40ss` is `p@ss` to the
    driver, whose error may quote it). A `user:password@` in a line is redacted anyway; a query's, or one quoted
    apart from its URL, was not."""
    found: list[str] = []
    for url in (settings.database_url, getattr(settings, "redis_url", None)):
        try:
            parts = urlsplit(url or "")
            password = parts.password
        except ValueError:
            continue
        written = parts.netloc.rpartition("@")[0].partition(":")[2] if "@" in parts.netloc else ""
        # Userinfo is percent-decoded with its `+` kept, as the drivers read it (`p%40ss+w` is `p@ss+w`).
        candidates = [written, unquote(written), password or ""]
        candidates += [value for name, value in parse_qsl(parts.query) if _is_connection_secret(name)]
        candidates += [variant for name, _, value in _query_pairs(url or "")
                       if _is_connection_secret(unquote_plus(name))
                       for variant in (value, unquote(value))]  # libpq decodes a query's escapes, and keeps its `+`
        # A development password (`postgres`, `password`) is a word other lines hold: redacted, "postgresql://" and
        # "password authentication failed" lost their words. The regex for `user:password@` still takes it in a URL.
        readable = f"{parts.scheme} {parts.hostname} {parts.path} {parts.username}".lower()
        found += [value for value in candidates if len(value) >= MIN_CONNECTION_SECRET_CHARS
                  and value.lower() not in readable and value.lower() not in _WORD_PASSWORDS]
    return list(dict.fromkeys(value for value in found if value))


MIN_CONNECTION_SECRET_CHARS = 8
# Development passwords that are words a line is read by: redacted only where a URL holds them.
_WORD_PASSWORDS = frozenset({"password", "postgres", "postgresql", "changeme", "database", "localhost", "redispass"})


def _is_connection_secret(name: str) -> bool:
    """Whether a database or Redis URL's query parameter holds a credential: named like one, or libpq's
    `sslpassword` (the client key's), one word."""
    return is_credential_name(name) or name.lower() in ("sslpassword", "password", "passwd")
