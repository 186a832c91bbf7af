"""Where a browser sends no `Sec-Fetch-Site` (a plain-http origin, a browser from before 2023), the chat tells a
page of another site by `Origin` against the host the request went to (tests/web/test_cross_site_post.py has
the browser's side)."""

from __future__ import annotations

import pytest

from tests.conftest import app_client


@pytest.mark.parametrize(("headers", "status"), [
    ({"Origin": "http://evil.example"}, 403),
    ({"Origin": "null"}, 403),  # a sandboxed or opaque page
    ({"Origin": "http://gateway.test.evil.example"}, 403),
    ({"Origin": "http://gateway.test:8080"}, 403),  # another port is another origin
    ({"Origin": "http://evil.example", "X-Forwarded-Host": "chat.example.com"}, 403),
    ({"Origin": "http://gateway.test"}, 200),  # the widget's own page
    ({"Origin": "https://chat.example.com", "X-Forwarded-Host": "chat.example.com"}, 200),  # behind a proxy
    ({"Origin": "https://chat.example.com", "Host": "chat.example.com:443"}, 200),
    ({"Origin": "http://evil.example", "Sec-Fetch-Site": "same-origin"}, 200),  # the browser's own word first
    ({}, 200),  # no browser page: a backend, curl
])
async def test_a_post_from_another_origin_is_403_and_stores_nothing(tmp_path, headers, status):
    async with app_client(tmp_path, bots=[{"name": "acme"}]) as client:
        response = await client.post("/v1/bots/acme/chat", headers=headers,
                                     json={"session_id": "s-origin", "text": "hello"})
        transcript = (await client.get("/v1/bots/acme/sessions/s-origin/messages")).json()["messages"]
    assert response.status_code == status, response.text
    assert len(transcript) == (0 if status == 403 else 2)
    if status == 403:
        assert "proxy_set_header Host" in response.json()["error"]


@pytest.mark.parametrize(("host", "status"), [
    ("192.168.1.5", 403),  # nginx's `$host`: the host name alone, its port dropped
    ("192.168.1.5:8080", 200),  # nginx's `$http_host`: the Host the browser sent, port and all
])
async def test_the_proxy_setting_the_refusal_names_keeps_the_port(tmp_path, host, status):
    # A widget on a LAN address over plain http (no Sec-Fetch-Site), behind nginx on port 8080: the 403 told to
    # pass Host on with `proxy_set_header Host $host;`, whose host name has no port, so the widget's own posts
    # (Origin http://192.168.1.5:8080) stayed refused as from another site after the advice was followed.
    async with app_client(tmp_path, bots=[{"name": "acme"}]) as client:
        response = await client.post("/v1/bots/acme/chat", headers={"Origin": "http://192.168.1.5:8080", "Host": host},
                                     json={"session_id": "s-port", "text": "hello"})
        refused = (await client.post("/v1/bots/acme/chat", headers={"Origin": "http://evil.example"},
                                     json={"session_id": "s-port", "text": "hello"})).json()["error"]
    assert response.status_code == status, response.text
    assert "proxy_set_header Host $http_host;" in refused and "$host;" not in refused
