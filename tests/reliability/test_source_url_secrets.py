"""A `urls` or `sitemap` source whose URL carries a credential in its query (`?access_token=${WIKI_TOKEN}`,
as a private wiki's export link does): the credential is the gateway's, never shown to a customer, an
operator, the model, a log reader or `/readyz`."""

from __future__ import annotations

from aiohttp import web

from tests.conftest import app_client
from tests.fakes.web_server import PAGE, serving

WIKI_TOKEN = "wiki-token-7Hq2Lp9Zx4"


def _private_wiki(*, up: bool = True) -> web.Application:
    """A site that serves its page only with the token, as a private wiki's export link does."""

    async def page(request: web.Request) -> web.Response:
        if not up:
            return web.Response(status=503, text="down for maintenance")
        if request.query.get("access_token") != WIKI_TOKEN:
            return web.Response(status=401, text="token required")
        return web.Response(text=PAGE.format("Refunds"), content_type="text/html")

    app = web.Application()
    app.router.add_get("/export/refunds", page)
    return app


def _bot(base: str) -> dict:
    url = base + "/export/refunds?format=html&access_token=${WIKI_TOKEN}"
    return {"name": "acme", "channels": {"web": {}},
            "sources": [{"name": "wiki", "type": "urls", "urls": [url], "schedule": "0 3 * * *"}]}


async def test_a_source_urls_credential_reaches_no_customer_operator_or_model(tmp_path):
    async with serving(_private_wiki()) as base:
        async with app_client(tmp_path, bots=[_bot(base)], env={"WIKI_TOKEN": WIKI_TOKEN}, ingest=True) as client:
            answer = await client.post("/v1/bots/acme/chat", json={"session_id": "s-1", "text": "Refunds for customers?"})
            transcript = await client.get("/v1/bots/acme/sessions/s-1/messages")
            found = await client.services.knowledge.search("acme", ["Refunds for customers"],
                                                           client.services.settings.bot("acme").retrieval)
    assert answer.status_code == 200 and answer.json()["citations"], answer.text  # the page was read and cited
    [citation] = answer.json()["citations"]
    assert citation["url"] == base + "/export/refunds?format=html"
    assert WIKI_TOKEN not in answer.text and WIKI_TOKEN not in transcript.text
    # What the model reads (the extract's source and url) and what operators see (retrieved passages).
    hits = found.hits + found.candidates
    assert hits and all(WIKI_TOKEN not in f"{hit.document} {hit.url}" for hit in hits)


def test_without_url_secrets_keeps_every_other_parameter_and_what_is_no_web_url():
    from gateway.url_secrets import without_url_secrets

    assert without_url_secrets("https://w.example/p?page=2&apikey=k1&lang=en") == "https://w.example/p?page=2&lang=en"
    assert without_url_secrets("https://w.example/p?page=2") == "https://w.example/p?page=2"
    assert without_url_secrets("faq?token=1.md") == "faq?token=1.md"  # a directory source's file name


async def test_a_failing_source_urls_credential_is_redacted_from_readyz_and_the_log(tmp_path, capfd):
    """/readyz answers anyone, and its error of a failed page named the URL with its token."""
    async with serving(_private_wiki(up=False)) as base:
        async with app_client(tmp_path, bots=[_bot(base)], env={"WIKI_TOKEN": WIKI_TOKEN}, start_worker=False,
                              log_level="WARNING") as client:
            [report] = await client.services.knowledge.ingest()
            ready = await client.get("/readyz")
    assert report.status != "ok" and "503" in report.errors[-1]
    wiki = ready.json()["ingest"]["acme/wiki"]
    assert "access_token=[REDACTED]" in wiki["error"], wiki
    assert WIKI_TOKEN not in ready.text
    assert WIKI_TOKEN not in capfd.readouterr().err


def test_a_parameter_only_named_near_a_credential_stays_in_the_citation():
    # `spaceKey`, `author`, `keyword`, `passage` matched "key", "auth", "pass": a Confluence page's citation lost
    # its `spaceKey` and pointed elsewhere, and the value ("DOC") was redacted from every log line.
    from gateway.url_secrets import query_secrets, without_url_secrets

    page = "https://wiki.example/pages/viewpage.action?spaceKey=DOC&title=Refunds&author=ann&keyword=vat&passage=2"
    assert without_url_secrets(page) == page and query_secrets(page) == []
    signed = ("https://b.example/f.pdf?X-Amz-Credential=c1&X-Amz-Signature=s1&sig=s2&api_key=k1&apiKey=k2"
              "&subscription-key=k3&access_token=t1&client_secret=s3&password=p1&key=k4&page=2")
    assert without_url_secrets(signed) == "https://b.example/f.pdf?page=2"
    assert query_secrets(signed) == ["c1", "s1", "s2", "k1", "k2", "k3", "t1", "s3", "p1", "k4"]


WIKI_PASSWORD = "wiki-pass-Qm3Rt8Vw2Y"


def _basic_auth_wiki(*, up: bool = True) -> web.Application:
    """A site that serves its pages only with HTTP Basic credentials, as given in a URL's userinfo: a
    user and password (`https://wiki-bot:…@wiki/…`), or a token alone as the user (`https://TOKEN@wiki/…`)."""
    import base64

    allowed = {f"wiki-bot:{WIKI_PASSWORD}", f"{WIKI_TOKEN}:"}

    async def page(request: web.Request) -> web.Response:
        if not up:
            return web.Response(status=503, text="down for maintenance")
        scheme, _, encoded = request.headers.get("Authorization", "").partition(" ")
        if scheme != "Basic" or base64.b64decode(encoded).decode() not in allowed:
            return web.Response(status=401, text="credentials required")
        return web.Response(text=PAGE.format(request.match_info["name"].title()), content_type="text/html")

    app = web.Application()
    app.router.add_get("/export/{name}", page)
    return app


def _userinfo_bot(base: str) -> dict:
    host = base.removeprefix("http://")
    urls = [f"http://wiki-bot:${{WIKI_PASSWORD}}@{host}/export/refunds", f"http://${{WIKI_TOKEN}}@{host}/export/shipping"]
    return {"name": "acme", "channels": {"web": {}},
            "sources": [{"name": "wiki", "type": "urls", "urls": urls, "schedule": "0 3 * * *"}]}


USERINFO_ENV = {"WIKI_TOKEN": WIKI_TOKEN, "WIKI_PASSWORD": WIKI_PASSWORD}


async def test_a_source_urls_userinfo_reaches_no_customer_operator_or_model(tmp_path):
    """`https://user:password@wiki/…` (or a token as the user) is how HTTP Basic credentials are given in a
    URL: the page was fetched with them, and cited with them."""
    async with serving(_basic_auth_wiki()) as base:
        async with app_client(tmp_path, bots=[_userinfo_bot(base)], env=USERINFO_ENV, ingest=True) as client:
            answers = [await client.post("/v1/bots/acme/chat", json={"session_id": f"u-{topic}", "text": f"{topic} for customers?"})
                       for topic in ("Refunds", "Shipping")]
            found = await client.services.knowledge.search("acme", ["Refunds for customers", "Shipping for customers"],
                                                           client.services.settings.bot("acme").retrieval)
    urls = {citation["url"] for answer in answers for citation in answer.json()["citations"]}
    assert urls == {base + "/export/refunds", base + "/export/shipping"}, [a.text for a in answers]
    assert all(WIKI_PASSWORD not in a.text and WIKI_TOKEN not in a.text for a in answers)
    hits = found.hits + found.candidates
    assert hits and all(secret not in f"{hit.document} {hit.url}" and "@" not in f"{hit.document} {hit.url}"
                        for hit in hits for secret in (WIKI_PASSWORD, WIKI_TOKEN))


async def test_a_failing_source_urls_userinfo_is_redacted_from_readyz_and_the_log(tmp_path, capfd):
    async with serving(_basic_auth_wiki(up=False)) as base:
        async with app_client(tmp_path, bots=[_userinfo_bot(base)], env=USERINFO_ENV, start_worker=False,
                              log_level="WARNING") as client:
            [report] = await client.services.knowledge.ingest()
            ready = await client.get("/readyz")
    assert report.status != "ok" and all("503" in error for error in report.errors), report.errors
    assert WIKI_PASSWORD not in ready.text and WIKI_TOKEN not in ready.text, ready.text
    err = capfd.readouterr().err
    assert WIKI_PASSWORD not in err and WIKI_TOKEN not in err


def test_without_url_secrets_drops_the_userinfo_and_keeps_the_host_port_and_path():
    from gateway.url_secrets import userinfo_secret, without_url_secrets

    assert without_url_secrets("https://bot:p%40ss@wiki.example:8443/a/@ann?page=2&token=t1") == \
        "https://wiki.example:8443/a/@ann?page=2"
    assert without_url_secrets("https://bot:p@ss@wiki.example/a") == "https://wiki.example/a"  # an @ unescaped
    assert without_url_secrets("https://wiki.example:port/a?token=t1") == "https://wiki.example:port/a"
    assert without_url_secrets("http://tok123@[2001:db8::1]:8080/x") == "http://[2001:db8::1]:8080/x"
    assert without_url_secrets("https://wiki.example/users/@ann?q=a@b") == "https://wiki.example/users/@ann?q=a@b"
    assert [userinfo_secret(u) for u in ("https://bot:p%40ss@w.example/", "https://tok123@w.example/",
                                         "https://w.example/@ann", "mailto:ann@w.example")] == ["p%40ss", "tok123", None, None]


async def test_a_failing_source_urls_credential_is_redacted_from_the_info_log_too(tmp_path, capfd):
    """At the default level, `ingest.done` lists the run's errors ("<url>: answered 503"): a list field, which
    redaction (of each text field) passed over, so the token was in the line whole."""
    async with serving(_private_wiki(up=False)) as base:
        async with app_client(tmp_path, bots=[_bot(base)], env={"WIKI_TOKEN": WIKI_TOKEN}, start_worker=False,
                              log_level="INFO") as client:
            [report] = await client.services.knowledge.ingest()
    assert report.status != "ok" and any(WIKI_TOKEN in error for error in report.errors), report.errors
    err = capfd.readouterr().err
    assert "ingest.done" in err and "access_token=[REDACTED]" in err, err
    assert WIKI_TOKEN not in err


async def test_a_source_urls_credential_written_encoded_is_redacted_from_readyz_and_the_log(tmp_path, capfd):
    """A token with a `+` or a `%2F` in it was looked for as the URL decodes it (`a b/c`), so the line that
    quoted the URL as written (`a+b%2Fc`) kept it whole."""
    token = "Wiki+Tok%2Fen-7Hq2Lp9"
    async with serving(_private_wiki(up=False)) as base:
        async with app_client(tmp_path, bots=[_bot(base)], env={"WIKI_TOKEN": token}, start_worker=False,
                              log_level="INFO") as client:
            [report] = await client.services.knowledge.ingest()
            ready = await client.get("/readyz")
    assert report.status != "ok" and any(token in error for error in report.errors), report.errors
    err = capfd.readouterr().err
    assert "ingest.done" in err and "access_token=[REDACTED]" in err, err
    for shown in (err, ready.text):
        assert "7Hq2Lp9" not in shown, shown
