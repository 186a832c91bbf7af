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


async def test_a_body_the_parser_cannot_read_says_why_not_only_that_it_failed(tmp_path) -> None:
    """Not UTF-8, nested 100,000 deep, an integer of 5,000 digits: FastAPI answered each with one
    generic line, "There was an error parsing the body"."""
    async with app_client(tmp_path, bots=[{"name": "acme", "channels": {"web": {}}}], start_worker=False) as client:
        latin1 = await client.post("/v1/bots/acme/chat", content='{"session_id": "s-1", "text": "café"}'.encode("latin-1"),
                                   headers=JSON)
        deep = await client.post("/v1/bots/acme/chat", content=b"[" * 100_000 + b"]" * 100_000, headers=JSON)
        digits = await client.post("/v1/bots/acme/chat", content=b'{"session_id": "s-1", "text": ' + b"9" * 5000 + b"}",
                                   headers=JSON)
        transcript = (await client.get("/v1/bots/acme/sessions/s-1/messages")).json()
    assert (latin1.status_code, latin1.json()) == (
        400, {"error": "the body is not valid JSON: it is not UTF-8 text (byte 0xe9 at byte 34)"})
    assert (deep.status_code, deep.json()) == (400, {"error": "the body is not valid JSON: it is nested too deeply"})
    assert digits.status_code == 400 and digits.json()["error"].startswith("the body is not valid JSON: Exceeds the limit")
    assert transcript["messages"] == []


async def test_a_missing_field_names_the_keys_the_body_has(tmp_path) -> None:
    """`{"session": "s-1", "text": "hi"}` got "session_id: Field required", which left a misspelt key to be
    found by comparing with the README; the 422 now lists the keys it got."""
    async with app_client(tmp_path, bots=[{"name": "acme", "channels": {"web": {}}}], start_worker=False) as client:
        misspelt = await client.post("/v1/bots/acme/chat", json={"session": "s-1", "text": "hi"})
        empty = await client.post("/v1/bots/acme/chat", json={})
    assert (misspelt.status_code, misspelt.json()) == (
        422, {"error": "session_id: Field required (the body has: session, text)"})
    assert empty.json()["error"] == "session_id: Field required (the body has no keys)"


async def test_a_body_that_is_no_json_object_says_so(tmp_path) -> None:
    """`[{"session_id": …}]` or a bare `"hi"`, valid JSON of another type, got pydantic's "Input should be a valid
    dictionary or object to extract fields from", which names neither the body nor what to send."""
    async with app_client(tmp_path, bots=[{"name": "acme", "channels": {"web": {}}}], start_worker=False) as client:
        listed = await client.post("/v1/bots/acme/chat", json=[{"session_id": "s-1", "text": "hi"}])
        text = await client.post("/v1/bots/acme/chat", json="hi")
    assert (listed.status_code, listed.json()) == (
        422, {"error": 'the body must be a JSON object ({"key": value, …}), not a list'})
    assert text.json()["error"] == 'the body must be a JSON object ({"key": value, …}), not a string'
