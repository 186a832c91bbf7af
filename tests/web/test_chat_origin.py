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
