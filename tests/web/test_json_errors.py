"""Malformed JSON is the client's syntax error: 400 with where it broke, on the web chat and the operator API."""

from __future__ import annotations

from tests.conftest import app_client

TOKEN = "json-ops-token-0123456789"
JSON = {"Content-Type": "application/json"}


async def test_json_routes_answer_malformed_json_with_400_and_other_content_types_with_415(tmp_path) -> None:
    bots = [{"name": "acme", "channels": {"web": {}}}]
    operators = [{"name": "sam", "token": "${JSON_OPS_TOKEN}", "bots": ["acme"]}]
    async with app_client(tmp_path, bots=bots, operators=operators, env={"JSON_OPS_TOKEN": TOKEN},
                          start_worker=False) as client:
        chat = await client.post("/v1/bots/acme/chat", content=b"not json", headers=JSON)
        cut_short = await client.post("/v1/bots/acme/chat", content=b'{"session_id": "s-1",', headers=JSON)
        operator = await client.post("/v1/escalations/1/reply", content=b"{oops",
                                     headers=JSON | {"Authorization": f"Bearer {TOKEN}"})
        plain = await client.post("/v1/bots/acme/chat", content=b"not json", headers={"Content-Type": "text/plain"})
        transcript = (await client.get("/v1/bots/acme/sessions/s-1/messages")).json()

    assert (chat.status_code, chat.json()) == (400, {"error": "the body is not valid JSON: Expecting value at character 0"})
    assert cut_short.status_code == 400 and cut_short.json()["error"].endswith("at character 21")  # the end: the object never closes
    assert operator.status_code == 400 and operator.json()["error"].startswith("the body is not valid JSON: ")
    assert plain.status_code == 415 and "text/plain" in plain.json()["error"]
    assert transcript["messages"] == []  # none of them was stored
