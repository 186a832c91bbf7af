"""`http` tools against a real HTTP server: what the model's arguments can and cannot reach."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager

import pytest
from aiohttp import web

from gateway.models import CallerIdentity
from gateway.pipeline.tools import BotTools, http_tool_secrets
from gateway.settings import BotSettings, Settings
from tests.fakes.web_server import serving

ALICE = CallerIdentity(bot="acme", channel="web", contact_external_id="alice")
STOCK_KEY = "stock-key-SECRET-123456"
WEATHER_KEY = "weather-key-SECRET-987654"


@asynccontextmanager
async def api():
    """A real server that records (method, raw path, Authorization, JSON body) and answers /broken with 500."""
    seen: list[tuple[str, str, str | None, object]] = []

    async def handle(request: web.Request) -> web.Response:
        body = await request.json() if request.can_read_body else None
        seen.append((request.method, request.raw_path, request.headers.get("Authorization"), body))
        if request.path.startswith("/broken"):
            return web.Response(status=500, text="upstream exploded")
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    async with serving(app) as base:
        yield base, seen


def bot(*tools: dict) -> BotSettings:
    return BotSettings(name="acme", tools=list(tools))


def params(*names: str) -> dict:
    """A `parameters` schema declaring `names` as strings."""
    return {"type": "object", "properties": {name: {"type": "string"} for name in names}}


async def test_an_argument_fills_its_own_path_segment_and_cannot_climb_the_path():
    async with api() as (base, seen):
        tools = BotTools(bot({"name": "stock", "type": "http", "url": base + "/v1/public/products/{sku}/{field}",
                              "headers": {"Authorization": f"Bearer {STOCK_KEY}"}, "parameters": params("sku", "field")}))
        for sku, field in (("..", ".."), ("a/../../admin", "."), ("A-1.2", "price")):
            outcome = await tools.call("stock", {"sku": sku, "field": field}, identity=ALICE)
            assert outcome.error is None
    paths = [path for _, path, _, _ in seen]
    assert paths == ["/v1/public/products/%2E%2E/%2E%2E", "/v1/public/products/a%2F..%2F..%2Fadmin/%2E",
                     "/v1/public/products/A-1.2/price"]



async def test_an_empty_argument_cannot_drop_its_path_segment_and_reach_the_collection():
    # "" as the last segment asked for /orders/ (the list of every order, with the tool's key), and in the
    # middle it joined its neighbours (/products//price): another endpoint than the template names.
    async with api() as (base, seen):
        tools = BotTools(bot({"name": "order", "type": "http", "url": base + "/v1/orders/{order_id}",
                              "parameters": params("order_id")},
                             {"name": "stock", "type": "http", "url": base + "/v1/public/products/{sku}/{field}",
                              "parameters": params("sku", "field")}))
        last = await tools.call("order", {"order_id": ""}, identity=ALICE)
        middle = await tools.call("stock", {"sku": "", "field": "price"}, identity=ALICE)
    assert last.error == "invalid arguments: 'order_id' is empty"
    assert middle.error == "invalid arguments: 'sku' is empty"
    assert seen == []

async def test_an_empty_argument_for_a_query_field_is_sent_as_an_empty_value():
    # Only a path segment disappears when empty; `?status=` is a filter left out, which an API reads as such.
    async with api() as (base, seen):
        tools = BotTools(bot({"name": "orders", "type": "http", "url": base + "/v1/orders?email={email}&status={status}",
                              "parameters": params("email", "status")}))
        outcome = await tools.call("orders", {"email": "a@example.com", "status": ""}, identity=ALICE)
    assert outcome.error is None
    assert [path for _, path, _, _ in seen] == ["/v1/orders?email=a%40example.com&status="]


async def test_a_call_with_an_undeclared_argument_is_refused_without_a_request():
    async with api() as (base, seen):
        tools = BotTools(bot({"name": "ticket", "type": "http", "method": "POST", "url": base + "/tickets",
                              "parameters": params("subject")},
                             # `city` fills the path: with `town` declared, {"city": "Oslo"} requested /weather/Oslo.
                             {"name": "weather", "type": "http", "url": base + "/weather/{city}",
                              "parameters": params("city", "town")}))
        invented = await tools.call("ticket", json.dumps({"subject": "Refund", "role": "admin"}), identity=ALICE)
        missing = await tools.call("weather", {"town": "Oslo"}, identity=ALICE)
        sent = await tools.call("ticket", {"subject": "Refund"}, identity=ALICE)
    assert invented.error == "invalid arguments: 'role' is not a parameter of this tool"
    assert missing.error == "invalid arguments: missing 'city'"
    assert sent.error is None and [body for _, _, _, body in seen] == [{"subject": "Refund"}]


async def test_an_argument_the_url_takes_must_be_declared(tmp_path):
    from gateway.errors import ConfigError
    from gateway.settings import load_settings
    from tests.conftest import write_config

    async with api() as (base, seen):
        spec = {"name": "weather", "type": "http", "url": base + "/weather/{city}", "parameters": params("town")}
        with pytest.raises(ConfigError) as caught:
            load_settings(write_config(tmp_path, bots=[{"name": "acme", "tools": [spec]}]))
        assert (caught.value.key, caught.value.problem) == (
            "bots[0].tools[0]", "`url` field {city} is not declared in `parameters` (its `properties`), so no call "
                                "could fill it")
        tools = BotTools(bot({**spec, "url": base + "/weather?q={town}"}))
        outcome = await tools.call("weather", {"city": "Oslo"}, identity=ALICE)
    assert outcome.error == "invalid arguments: 'city' is not a parameter of this tool" and seen == []


async def test_a_call_whose_arguments_would_change_the_server_is_refused_without_a_request():
    """Defence in depth: the config refuses a field in the host (test_config_tools), and a call still
    checks that its URL goes to the template's own server. Built unchecked here, as a config bypassing
    the load-time check would be."""
    from gateway.bot_settings import ToolSettings

    async with api() as (base, seen):
        port = base.rsplit(":", 1)[1]
        spec = ToolSettings.model_construct(name="lookup", type="http", url=f"http://{{host}}:{port}/v1",
                                            method="GET", headers={}, timeout=5.0, parameters=params("host"))
        tools = BotTools(BotSettings.model_construct(**{**bot().__dict__, "tools": [spec]}))
        outcome = await tools.call("lookup", {"host": "127.0.0.1"}, identity=ALICE)
    assert outcome.error == "refused: the arguments would send this call to another server" and seen == []


async def test_a_get_sends_the_parameters_its_path_does_not_take_as_its_query_string():
    """`{"q": "order 42"}` reached the server as a bare `GET /search`: the answer came from unfiltered data."""
    async with api() as (base, seen):
        tools = BotTools(bot({"name": "orders", "type": "http", "url": base + "/shops/{shop}/search?lang=en",
                              "parameters": {"type": "object", "properties": {
                                  "shop": {"type": "string"}, "q": {"type": "string"}, "limit": {"type": "integer"}}}}))
        outcome = await tools.call("orders", {"shop": "north", "q": "order 42", "limit": 5}, identity=ALICE)
    assert outcome.error is None
    assert seen[0][:2] == ("GET", "/shops/north/search?lang=en&q=order+42&limit=5")


async def test_an_error_names_the_status_and_never_the_url_with_its_key():
    async with api() as (base, _):
        tools = BotTools(bot(
            {"name": "weather", "type": "http", "url": base + "/broken/weather?city={city}&apikey=" + WEATHER_KEY,
             "parameters": params("city")},
            {"name": "down", "type": "http", "url": "http://127.0.0.1:9/x?token=" + WEATHER_KEY},
        ))
        failed = await tools.call("weather", {"city": "Berlin"}, identity=ALICE)
        unreachable = await tools.call("down", {}, identity=ALICE)
    assert failed.error == "the service answered HTTP 500"
    assert unreachable.error == "ConnectError: the service could not be reached"


def test_http_tool_credentials_are_redacted_from_logs():
    settings = Settings(bots=[bot(
        {"name": "stock", "type": "http", "url": "https://api.example/v1/{sku}", "headers": {"Authorization": f"Bearer {STOCK_KEY}"},
         "parameters": params("sku")},
        {"name": "weather", "type": "http", "url": "https://api.example/w?city={city}&apikey=" + WEATHER_KEY + "&units=metric",
         "parameters": params("city")},
    )])
    assert http_tool_secrets(settings) == sorted([f"Bearer {STOCK_KEY}", STOCK_KEY, WEATHER_KEY])
    # A key with a `+` or a `%2F` in it was redacted only as decoded (`ab cd/…`): a line quotes the URL as written.
    settings = Settings(bots=[bot({"name": "weather", "type": "http", "url": "https://api.example/w?apikey=ab+cd%2F"
                                   + WEATHER_KEY, "parameters": params()})])
    assert f"ab+cd%2F{WEATHER_KEY}" in http_tool_secrets(settings)


def test_an_http_tools_plain_headers_are_no_secrets():
    """`Accept: application/json` was a secret: every "application/json" in the logs read [REDACTED]."""
    settings = Settings(bots=[bot(
        {"name": "stock", "type": "http", "url": "https://api.example/v1/{sku}", "parameters": params("sku"),
         "headers": {"Accept": "application/json", "Content-Type": "application/json; charset=utf-8",
                     "User-Agent": "acme-support-bot/1.0", "X-Shop-Token": STOCK_KEY}},
    )])
    assert http_tool_secrets(settings) == [STOCK_KEY]


def test_an_http_tools_credential_given_as_its_urls_user_is_redacted_from_logs(capsys):
    """A key given as HTTP Basic's user with no password (`https://sk_live_…:@api.stripe.example/v1/…`, as
    Stripe documents it) was neither among the secrets a log redacts nor a URL password to its pattern."""
    from gateway.observability.logs import configure_logging, redact

    key = "sk_live_51HqLyjWDarjtT1zdp7dc"
    settings = Settings(bots=[bot({"name": "charges", "type": "http", "url": f"https://{key}:@api.stripe.example/v1/charges/{{id}}",
                                   "parameters": params("id")})])
    assert key in http_tool_secrets(settings)
    configure_logging(level="INFO")  # no secret configured: the pattern alone
    assert redact(f"GET https://{key}:@api.stripe.example/v1/charges failed") == \
        "GET https://[REDACTED]:@api.stripe.example/v1/charges failed"
    assert redact("https://user@host/x") == "https://user@host/x"  # a user name alone is no secret


async def test_a_call_that_changes_something_carries_the_same_idempotency_key_in_every_attempt():
    """The process died during a POST (never saved, so the retry makes it again): both requests carry one
    `Idempotency-Key`, which the API can dedupe on. A GET carries none."""
    from gateway.pipeline.tool_journal import ToolJournal

    async def save(entries: list[dict]) -> None:
        pass

    headers: list[dict[str, str]] = []

    async def handle(request: web.Request) -> web.Response:
        headers.append(dict(request.headers))
        return web.json_response({"ticket": "T-1"})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    async with serving(app) as base:
        tools = BotTools(bot({"name": "ticket", "type": "http", "method": "POST", "url": base + "/tickets",
                              "parameters": {"type": "object", "properties": {"subject": {"type": "string"}}}},
                             {"name": "status", "type": "http", "url": base + "/status"}))
        keys = []
        for _attempt in range(2):
            journal = ToolJournal([], save=save, seed="42:2026-12-03T12:00:00+00:00:web/s/m1")
            keys.append([journal.key("ticket", {"subject": "Refund"}), journal.key("ticket", {"subject": "Refund"})])
            await tools.call("ticket", {"subject": "Refund"}, identity=ALICE, key=keys[-1][0])
        await tools.call("status", {}, identity=ALICE, key=keys[0][1])
    assert keys[0] == keys[1] and keys[0][0] != keys[0][1]  # the second same call is another call
    assert [h.get("Idempotency-Key") for h in headers] == [keys[0][0], keys[0][0], None]


def test_idempotency_keys_differ_between_messages_and_installs():
    from gateway.pipeline.tool_journal import ToolJournal

    async def save(entries: list[dict]) -> None:
        pass

    def first_key(seed: str) -> str:
        return ToolJournal([], save=save, seed=seed).key("ticket", {"subject": "Refund"})

    assert first_key("42:2026-12-03T12:00:00+00:00:web/s/m1") == first_key("42:2026-12-03T12:00:00+00:00:web/s/m1")
    assert len({first_key("42:2026-12-03T12:00:00+00:00:web/s/m1"), first_key("43:2026-12-03T12:00:01+00:00:web/s/m2"),
                first_key("42:2026-11-02T08:00:00+00:00:tg/7/99")}) == 3


async def test_an_argument_of_another_type_than_declared_is_refused_without_a_request():
    """A customer talked the model into `{"email": {"$ne": null}}` (an operator query, where the API takes a
    string): it reached the service as it was, which matched every customer's orders."""
    async with api() as (base, seen):
        schema = {"type": "object", "properties": {"email": {"type": "string"}, "limit": {"type": "integer"},
                                                   "status": {"type": "string", "enum": ["open", "closed"]},
                                                   "tags": {"type": ["array", "null"]}}, "required": ["email"]}
        tools = BotTools(bot({"name": "orders", "type": "http", "method": "POST", "url": base + "/orders",
                              "parameters": schema}))
        operator = await tools.call("orders", {"email": {"$ne": None}}, identity=ALICE)
        listed = await tools.call("orders", {"email": ["a@example.com", "b@example.com"]}, identity=ALICE)
        flag = await tools.call("orders", {"email": "a@example.com", "limit": True}, identity=ALICE)
        other = await tools.call("orders", {"email": "a@example.com", "status": "any"}, identity=ALICE)
        no_email = await tools.call("orders", {"email": None}, identity=ALICE)
        sent = await tools.call("orders", {"email": "a@example.com", "limit": 5, "status": "open", "tags": None},
                                identity=ALICE)
        # `null` for an optional field is no value (models write it so), whatever its type or enum.
        optional = await tools.call("orders", {"email": "b@example.com", "status": None, "limit": None},
                                    identity=ALICE)
    assert operator.error == "invalid arguments: 'email' must be a string, not an object"
    assert listed.error == "invalid arguments: 'email' must be a string, not an array"
    assert flag.error == "invalid arguments: 'limit' must be an integer, not a boolean"
    assert other.error == "invalid arguments: 'status' must be one of 'open', 'closed'"
    assert no_email.error == "invalid arguments: 'email' must be a string, not null"
    assert sent.error is None and optional.error is None
    assert [body for _, _, _, body in seen] == [{"email": "a@example.com", "limit": 5, "status": "open", "tags": None},
                                                {"email": "b@example.com", "status": None, "limit": None}]


async def test_an_argument_nested_in_an_object_or_array_is_checked_against_its_declared_type():
    """The operator query one level down (`{"filter": {"email": {"$ne": null}}}`, `{"emails": [{"$ne": null}]}`)
    reached the API as written: only the top-level properties' types were checked."""
    async with api() as (base, seen):
        schema = {"type": "object", "required": ["filter"], "properties": {
            "filter": {"type": "object", "required": ["email"],
                       "properties": {"email": {"type": "string"}, "status": {"type": ["string", "null"],
                                                                              "enum": ["open", "closed", None]}}},
            "emails": {"type": "array", "items": {"type": "string"}}}}
        tools = BotTools(bot({"name": "orders", "type": "http", "method": "POST", "url": base + "/orders",
                              "parameters": schema}))
        nested = await tools.call("orders", {"filter": {"email": {"$ne": None}}}, identity=ALICE)
        listed = await tools.call("orders", {"filter": {"email": "a@example.com"}, "emails": ["b@x.org", {"$ne": None}]},
                                  identity=ALICE)
        other = await tools.call("orders", {"filter": {"email": "a@example.com", "status": "any"}}, identity=ALICE)
        sent = await tools.call("orders", {"filter": {"email": "a@example.com", "status": None}, "emails": ["b@x.org"]},
                                identity=ALICE)
    assert nested.error == "invalid arguments: 'filter.email' must be a string, not an object"
    assert listed.error == "invalid arguments: 'emails[1]' must be a string, not an object"
    assert other.error == "invalid arguments: 'filter.status' must be one of 'open', 'closed', None"
    assert sent.error is None
    assert [body for _, _, _, body in seen] == [{"filter": {"email": "a@example.com", "status": None}, "emails": ["b@x.org"]}]


async def test_a_key_an_objects_schema_does_not_declare_is_refused_at_any_depth():
    """An undeclared parameter was refused only at the top: one level down, in an object whose schema lists
    its `properties`, `{"filter": {"email": …, "$where": "…"}}` (a query operator) and `{"customer": {…,
    "role": "admin"}}` reached the API as the model wrote them. `additionalProperties` says otherwise when
    a schema wants other keys; an object declared without `properties` still takes any."""
    async with api() as (base, seen):
        schema = {"type": "object", "properties": {
            "filter": {"type": "object", "properties": {"email": {"type": "string"}}},
            "customer": {"type": "object", "properties": {"name": {"type": "string"}},
                         "additionalProperties": {"type": "string"}},
            "labels": {"type": "object", "properties": {}, "additionalProperties": True},
            "extra": {"type": "object"}}}
        tools = BotTools(bot({"name": "orders", "type": "http", "method": "POST", "url": base + "/orders",
                              "parameters": schema}))
        operator = await tools.call("orders", {"filter": {"email": "a@example.com", "$where": "sleep(9)"}}, identity=ALICE)
        listed = await tools.call("orders", {"filter": {"email": "a@example.com"},
                                             "customer": {"name": "Al", "role": ["admin"]}}, identity=ALICE)
        sent = await tools.call("orders", {"filter": {"email": "a@example.com"}, "customer": {"name": "Al", "tier": "gold"},
                                           "labels": {"any": 1}, "extra": {"free": {"form": True}}}, identity=ALICE)
    assert operator.error == "invalid arguments: 'filter.$where' is not a property 'filter' declares"
    assert listed.error == "invalid arguments: 'customer.role' must be a string, not an array"
    assert sent.error is None
    assert [body for _, _, _, body in seen] == [{"filter": {"email": "a@example.com"}, "customer": {"name": "Al", "tier": "gold"},
                                                 "labels": {"any": 1}, "extra": {"free": {"form": True}}}]


def test_a_key_declared_in_an_anyof_or_allof_is_not_refused_as_undeclared():
    """The nested check read an object's own `properties` only: a key declared by `anyOf`/`allOf`/`$ref` (an
    order looked up by id or by email) was refused as undeclared, and the tool could not be called (review)."""
    from gateway.pipeline.tool_arguments import argument_problem

    lookup = {"type": "object", "properties": {"kind": {"type": "string"}},
              "anyOf": [{"properties": {"id": {"type": "string"}}}, {"properties": {"email": {"type": "string"}}}]}
    both = {"type": "object", "properties": {"kind": {"type": "string"}},
            "allOf": [{"properties": {"email": {"type": "string"}}}]}
    schema = {"type": "object", "properties": {"lookup": lookup, "both": both}}
    assert argument_problem({"lookup": {"kind": "order", "email": "a@example.com"},
                             "both": {"kind": "x", "email": "b@example.com"}}, schema) is None


def test_a_malformed_type_in_a_tools_schema_takes_anything_rather_than_failing_the_turn():
    from gateway.pipeline.tool_arguments import argument_problem

    schema = {"properties": {"n": {"type": 5}, "tags": {"type": [["string"]], "items": {"type": {"x": 1}}}}}
    assert argument_problem({"n": "a", "tags": ["b"]}, schema) is None


def test_an_enum_is_matched_by_json_value_so_true_is_not_1_nor_1_true():
    """`enum: [1]` without a `type` took `true` (Python's True == 1), and `enum: [true]` took 1: a customer
    could talk the model into a flag where the tool takes a number. JSON Schema compares JSON values: a
    boolean is no number, 1.0 is the number 1, "1" is a string, and arrays and objects item by item."""
    from gateway.pipeline.tool_arguments import argument_problem

    schema = {"properties": {"n": {"enum": [1, 2]}, "flag": {"enum": [True]}, "pair": {"enum": [[1, 0]]},
                             "opts": {"enum": [{"page": 1}]}}}
    assert argument_problem({"n": True}, schema) == "'n' must be one of 1, 2"
    assert argument_problem({"n": "1"}, schema) == "'n' must be one of 1, 2"
    assert argument_problem({"n": 1.0}, schema) is None and argument_problem({"n": 2}, schema) is None
    assert argument_problem({"flag": 1}, schema) == "'flag' must be one of True"
    assert argument_problem({"flag": True}, schema) is None
    assert argument_problem({"pair": [True, False]}, schema) == "'pair' must be one of [1, 0]"
    assert argument_problem({"pair": [1.0, 0]}, schema) is None
    assert argument_problem({"opts": {"page": True}}, schema) == "'opts' must be one of {'page': 1}"
    assert argument_problem({"opts": {"page": 1}}, schema) is None


async def test_a_text_answer_reaches_the_model_up_to_the_tools_limit_and_a_cut_is_marked(openai_fake):
    # A service answering in plain text (a CSV of orders) was cut at 4,000 characters, below the tool's
    # `max_result_chars` (16,000 by default) and without the mark of a cut: the model read the first
    # lines as all of them ("you have 90 orders").
    from tests.fakes.openai_server import ToolCallSpec, Turn
    from tests.pipeline.conftest import make_rig

    csv = "\n".join(f"A-{n},shipped" for n in range(1, 501))  # about 5,800 characters

    async def orders(request: web.Request) -> web.Response:
        return web.Response(text=csv, content_type="text/csv")

    app = web.Application()
    app.router.add_get("/orders", orders)
    async with serving(app) as base:
        rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [
            {"name": "orders", "type": "http", "url": base + "/orders"},
            {"name": "few_orders", "type": "http", "url": base + "/orders", "max_result_chars": 1000}]}])
        openai_fake.script("primary", Turn(tool_calls=(ToolCallSpec("orders", {}, id="o1"),
                                                       ToolCallSpec("few_orders", {}, id="o2"))),
                           Turn(text="Your last order, A-500, has shipped."))
        result = await rig.pipeline.handle(rig.turn("Have my orders shipped?"))

    whole, cut = [c["result"] for c in result.tool_calls]
    assert whole == csv
    assert cut["truncated"].startswith(f"the first 1,000 of {len(json.dumps(csv)):,} characters")
    sent = [m["content"] for m in openai_fake.requests_for("primary")[1].messages if m["role"] == "tool"]
    assert "A-500,shipped" in sent[0] and "truncated" in sent[1]
