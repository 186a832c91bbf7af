"""A request with a method its route does not take: 405, saying which methods it takes, with `Allow`."""

from __future__ import annotations

from tests.conftest import app_client


async def test_a_method_a_route_does_not_take_is_405_naming_the_ones_it_does(tmp_path) -> None:
    """`GET /v1/bots/acme/chat` (a browser's address bar, a curl without -X POST) said only "Method Not Allowed",
    and `POST /readyz` carried `Allow: HEAD` alone: Starlette names the methods of the first route of the path."""
    async with app_client(tmp_path, bots=[{"name": "acme", "channels": {"web": {}}}], start_worker=False) as client:
        chat = await client.get("/v1/bots/acme/chat")
        ready = await client.post("/readyz")
        static = await client.post("/static/widget.js")  # the static files answer their own 405
        unknown = await client.get("/v1/nothing-here")
    assert (chat.status_code, chat.headers["allow"], chat.json()) == (
        405, "POST", {"error": "method GET not allowed here: use POST"})
    assert (ready.status_code, ready.headers["allow"], ready.json()) == (
        405, "GET, HEAD", {"error": "method POST not allowed here: use GET or HEAD"})
    assert (static.status_code, static.headers["allow"], static.json()) == (
        405, "GET, HEAD", {"error": "method POST not allowed here: use GET or HEAD"})
    assert (unknown.status_code, unknown.json()) == (404, {"error": "Not Found"})


async def test_a_405_under_the_static_files_does_not_name_a_route_of_the_path_after_static(tmp_path) -> None:
    """The static files' mount sets the request's root_path to /static, and the 405's methods were looked up
    with it: `PUT /static/v1/bots/acme/chat` was matched as /v1/bots/acme/chat, and told to use POST (which the
    static files refuse too), and `POST /static/operator` was told GET alone, HEAD left out."""
    async with app_client(tmp_path, bots=[{"name": "acme", "channels": {"web": {}}}], start_worker=False) as client:
        chat = await client.put("/static/v1/bots/acme/chat")
        console = await client.post("/static/operator")
    for answer in (chat, console):
        assert (answer.status_code, answer.headers["allow"], answer.json()) == (
            405, "GET, HEAD", {"error": f"method {answer.request.method} not allowed here: use GET or HEAD"})
