"""The same tool call asked again in one turn, in the same round or a later one: it runs once, and every call
gets its result; one that failed runs again in a later round, under the failed call's idempotency key, and so
does a read (an http GET)."""

from __future__ import annotations

from contextlib import asynccontextmanager

from aiohttp import web
from structlog.testing import capture_logs

from gateway.pipeline.tool_journal import ToolJournal
from tests.fakes.openai_server import ToolCallSpec, Turn
from tests.fakes.web_server import serving
from tests.pipeline import sample_tools
from tests.pipeline.conftest import make_rig

TICKET = {"name": "create_ticket", "type": "python", "import_path": "tests.pipeline.sample_tools:create_ticket",
          "parameters": {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}}


async def _discard(entries: list[dict]) -> None:
    """A journal's save, for a turn that only needs its keys."""


async def test_the_same_call_asked_again_in_a_turn_runs_once_and_each_call_gets_its_result(openai_fake) -> None:
    """A model asked twice in a round for the same ticket, and once more in the next round (having lost track of
    the first): every call ran, and the customer had three tickets for one refund."""
    sample_tools.TICKETS.clear()
    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [TICKET]}])
    refund = {"title": "Refund order A-7"}
    openai_fake.script("primary",
                       Turn(tool_calls=(ToolCallSpec("create_ticket", refund, id="t1"),
                                        ToolCallSpec("create_ticket", refund, id="t2"),
                                        ToolCallSpec("create_ticket", {"title": "Other problem"}, id="t3"))),
                       Turn(tool_calls=(ToolCallSpec("create_ticket", refund, id="t4"),)),
                       Turn(text="Ticket T-1 is open for your refund."))
    with capture_logs() as logs:
        result = await rig.pipeline.handle(rig.turn("Please open a ticket for my refund"))

    assert [t["title"] for t in sample_tools.TICKETS] == ["Refund order A-7", "Other problem"]
    assert result.reply == "Ticket T-1 is open for your refund."
    assert [(c["id"], c["result"]["ticket"], c.get("repeated", False)) for c in result.tool_calls] == [
        ("t1", "T-1", False), ("t2", "T-1", True), ("t3", "T-2", False), ("t4", "T-1", True)]
    # Each call id is answered, as the protocol requires: the model read the one ticket three times.
    last = openai_fake.requests_for("primary")[-1].messages
    answered = {m["tool_call_id"]: m["content"] for m in last if m["role"] == "tool"}
    assert list(answered) == ["t1", "t2", "t3", "t4"] and all("T-1" in answered[i] for i in ("t1", "t2", "t4"))
    assert [e["event"] for e in logs if e["event"].startswith("tool.")] == [
        "tool.called", "tool.repeated", "tool.called", "tool.repeated"]


async def test_a_call_that_failed_runs_again_in_a_later_round_under_the_failed_calls_key(openai_fake) -> None:
    """The ticket service timed out (having taken the request): the model's try in the next round was given the
    same error, marked repeated, and the tool never ran again in the turn however often it was asked. It runs
    again, under the failed call's idempotency key, so the service gives the ticket it opened, not a second;
    the same call in the failed call's own round still shares its run."""
    sample_tools.KEYS_TAKEN.clear()
    late = {"name": "late_ticket", "type": "python", "import_path": "tests.pipeline.sample_tools:late_ticket",
            "timeout": 0.2, "parameters": TICKET["parameters"]}
    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [late]}])
    refund = {"title": "Refund order A-7"}
    openai_fake.script("primary",
                       Turn(tool_calls=(ToolCallSpec("late_ticket", refund, id="t1"),
                                        ToolCallSpec("late_ticket", refund, id="t2"))),
                       Turn(tool_calls=(ToolCallSpec("late_ticket", refund, id="t3"),)),
                       Turn(text="Ticket T-1 is open for your refund."))
    turn = rig.turn("Please open a ticket for my refund")
    turn.tool_journal = ToolJournal([], save=_discard, seed="7")
    with capture_logs() as logs:
        result = await rig.pipeline.handle(turn)

    first_key = ToolJournal([], save=_discard, seed="7").key("late_ticket", refund)
    assert sample_tools.KEYS_TAKEN == [first_key, first_key]
    timed_out = {"error": "tool timed out after 0.2s"}
    assert [(c["id"], c["result"], c.get("repeated", False)) for c in result.tool_calls] == [
        ("t1", timed_out, False), ("t2", timed_out, True), ("t3", {"ticket": "T-1", **refund}, False)]
    assert [e["event"] for e in logs if e["event"].startswith("tool.")] == ["tool.called", "tool.repeated",
                                                                           "tool.called"]


async def test_a_call_that_keeps_failing_runs_at_most_twice_in_a_turn(openai_fake) -> None:
    """A model that asked for the same call of a tool that was down in every round ran it in every round (up to
    `max_tool_rounds`, each run waiting on the service), for the same error each time: after its second failure
    it is given that failure without a run; other arguments still run."""
    sample_tools.DOWN_RUNS.clear()
    down = {"name": "down_ticket", "type": "python", "import_path": "tests.pipeline.sample_tools:down_ticket",
            "parameters": TICKET["parameters"]}
    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [down]}])
    refund = {"title": "Refund order A-7"}
    openai_fake.script("primary", *[Turn(tool_calls=(ToolCallSpec("down_ticket", refund, id=f"t{i}"),)) for i in (1, 2, 3)],
                       Turn(tool_calls=(ToolCallSpec("down_ticket", refund, id="t4"),
                                        ToolCallSpec("down_ticket", {"title": "Other"}, id="t5"))),
                       Turn(text="Sorry, I could not open the ticket."))
    with capture_logs() as logs:
        result = await rig.pipeline.handle(rig.turn("Please open a ticket for my refund"))

    assert sample_tools.DOWN_RUNS == ["Refund order A-7", "Refund order A-7", "Other"]
    failed = {"error": "the ticket service is unavailable"}
    assert [(c["id"], c["result"], c.get("repeated", False)) for c in result.tool_calls] == [
        ("t1", failed, False), ("t2", failed, False), ("t3", failed, True), ("t4", failed, True), ("t5", failed, False)]
    assert [e["event"] for e in logs if e["event"].startswith("tool.")] == [
        "tool.called", "tool.called", "tool.repeated", "tool.repeated", "tool.called"]


@asynccontextmanager
async def shop():
    """A real cart service: `GET /cart` reads the cart, `POST /cart/items` adds a `sku`; yields its base URL
    and the methods of the requests it got."""
    cart: list[str] = []
    seen: list[str] = []

    async def read(request: web.Request) -> web.Response:
        seen.append(request.method)
        return web.json_response({"items": list(cart)})

    async def add(request: web.Request) -> web.Response:
        seen.append(request.method)
        cart.append((await request.json())["sku"])
        return web.json_response({"added": cart[-1]})

    app = web.Application()
    app.router.add_get("/cart", read)
    app.router.add_post("/cart/items", add)
    async with serving(app) as base:
        yield base, seen


async def test_a_read_asked_again_in_a_later_round_reads_afresh(openai_fake) -> None:
    """A model read the cart, added to it, and read it again: the second read was given the first's result, the
    empty cart, so it told the customer the item was not there. A GET in a later round runs again; in one round
    it still runs once, and a call that is no GET (the add asked again) still runs once a turn."""
    async with shop() as (base, seen):
        rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [
            {"name": "get_cart", "type": "http", "url": base + "/cart"},
            {"name": "add_to_cart", "type": "http", "method": "POST", "url": base + "/cart/items",
             "parameters": {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]}}]}])
        openai_fake.script("primary",
                           Turn(tool_calls=(ToolCallSpec("get_cart", {}, id="r1"),
                                            ToolCallSpec("get_cart", {}, id="r2"))),
                           Turn(tool_calls=(ToolCallSpec("add_to_cart", {"sku": "A-7"}, id="w1"),)),
                           Turn(tool_calls=(ToolCallSpec("get_cart", {}, id="r3"),
                                            ToolCallSpec("add_to_cart", {"sku": "A-7"}, id="w2"))),
                           Turn(text="A-7 is in your cart."))
        result = await rig.pipeline.handle(rig.turn("Put A-7 in my cart"))

    assert seen == ["GET", "POST", "GET"]
    assert [(c["id"], c["result"], c.get("repeated", False)) for c in result.tool_calls] == [
        ("r1", {"items": []}, False), ("r2", {"items": []}, True), ("w1", {"added": "A-7"}, False),
        ("r3", {"items": ["A-7"]}, False), ("w2", {"added": "A-7"}, True)]
