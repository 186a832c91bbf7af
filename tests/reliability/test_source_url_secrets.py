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


def test_without_query_secrets_keeps_every_other_parameter_and_what_is_no_web_url():
    from gateway.url_secrets import without_query_secrets

    assert without_query_secrets("https://w.example/p?page=2&apikey=k1&lang=en") == "https://w.example/p?page=2&lang=en"
    assert without_query_secrets("https://w.example/p?page=2") == "https://w.example/p?page=2"
    assert without_query_secrets("faq?token=1.md") == "faq?token=1.md"  # a directory source's file name


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
    from gateway.url_secrets import query_secrets, without_query_secrets

    page = "https://wiki.example/pages/viewpage.action?spaceKey=DOC&title=Refunds&author=ann&keyword=vat&passage=2"
    assert without_query_secrets(page) == page and query_secrets(page) == []
    signed = ("https://b.example/f.pdf?X-Amz-Credential=c1&X-Amz-Signature=s1&sig=s2&api_key=k1&apiKey=k2"
              "&subscription-key=k3&access_token=t1&client_secret=s3&password=p1&key=k4&page=2")
    assert without_query_secrets(signed) == "https://b.example/f.pdf?page=2"
    assert query_secrets(signed) == ["c1", "s1", "s2", "k1", "k2", "k3", "t1", "s3", "p1", "k4"]
