"""The tool journal through the real pipeline: a retry replays the calls an earlier attempt at the same
message finished, and every call carries an idempotency key that is the same in every attempt."""

from __future__ import annotations

import asyncio

from structlog.testing import capture_logs

from gateway.pipeline.tool_journal import ToolJournal
from gateway.pipeline.tool_runs import bounded_result
from gateway.pipeline.tools import DEFAULT_RESULT_CHARS
from tests.fakes.openai_server import ToolCallSpec, Turn
from tests.pipeline import sample_tools
from tests.pipeline.conftest import make_rig


def _tool(name: str, **extra) -> dict:
    return {"name": name, "type": "python", "import_path": f"tests.pipeline.sample_tools:{name}", **extra}


async def _discard(entries: list[dict]) -> None:
    """A journal's save for tests that only replay."""


def _journal(saved: list[dict] | None = None, *, seed: str = "") -> ToolJournal:
    return ToolJournal(saved or [], save=_discard, seed=seed)


TICKET = _tool("create_ticket", parameters={"type": "object", "properties": {"title": {"type": "string"}},
                                            "required": ["title"]})


async def test_a_retry_replays_the_calls_an_earlier_attempt_finished_instead_of_running_them(openai_fake) -> None:
    """The process answering a message died after a tool ran (here: the next model call never returns).
    The retry's model asks for the same call: it gets the saved outcome, and no second ticket is opened."""
    sample_tools.TICKETS.clear()
    saved: list[list[dict]] = []

    async def save(entries: list[dict]) -> None:
        saved.append(entries)

    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [TICKET]}])
    call = ToolCallSpec("create_ticket", {"title": "Refund order A-7"}, id="t1")
    openai_fake.script("primary", Turn(tool_calls=(call,)), Turn(text="never sent", delay=30))
    first = rig.turn("Please open a ticket for my refund")
    first.tool_journal = ToolJournal([], save=save)
    task = asyncio.create_task(rig.pipeline.handle(first))
    while len(openai_fake.requests_for("primary")) < 2:  # the ticket exists, the answer is being written
        await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert len(sample_tools.TICKETS) == 1
    assert saved[-1] == [{"name": "create_ticket", "arguments": {"title": "Refund order A-7"},
                          "result": {"ticket": "T-1", "title": "Refund order A-7"}, "error": None, "escalate": None}]

    # The retry: same call (its keys in another order would match too), then one with other arguments.
    other = ToolCallSpec("create_ticket", {"title": "Second problem"}, id="t3")
    openai_fake.script("primary", Turn(tool_calls=(ToolCallSpec("create_ticket", {"title": "Refund order A-7"},
                                                                id="t2"), other)),
                       Turn(text="Ticket T-1 is open for your refund, and T-2 for the other problem."))
    retry = rig.turn("Please open a ticket for my refund")
    retry.tool_journal = ToolJournal(saved[-1], save=save)
    with capture_logs() as logs:
        result = await rig.pipeline.handle(retry)

    assert [t["title"] for t in sample_tools.TICKETS] == ["Refund order A-7", "Second problem"]
    assert result.reply == "Ticket T-1 is open for your refund, and T-2 for the other problem."
    assert [(c["name"], c["result"]["ticket"], c.get("replayed", False)) for c in result.tool_calls] == [
        ("create_ticket", "T-1", True), ("create_ticket", "T-2", False)]
    # The model reads the saved result as it read the first one.
    tool_turns = [m["content"] for m in openai_fake.requests_for("primary")[-1].messages if m["role"] == "tool"]
    assert "T-1" in tool_turns[0] and "T-2" in tool_turns[1]
    assert [e["event"] for e in logs if e["event"].startswith("tool.")] == ["tool.replayed", "tool.called"]
    # What a third attempt would replay: both calls, each once.
    assert [e["arguments"]["title"] for e in saved[-1]] == ["Refund order A-7", "Second problem"]


async def test_a_saved_call_answers_the_same_call_asked_again_too(openai_fake) -> None:
    """A turn runs a call asked twice once (tests/pipeline/test_tool_repeats.py): a retry replays it, and its
    repeat gets the replayed outcome, where it ran, opening the ticket the first attempt had opened again."""
    sample_tools.TICKETS.clear()
    entry = {"name": "create_ticket", "arguments": {"title": "Broken login"}, "result": {"ticket": "T-9"},
             "error": None, "escalate": None}

    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [TICKET]}])
    twice = tuple(ToolCallSpec("create_ticket", {"title": "Broken login"}, id=f"t{n}") for n in range(2))
    openai_fake.script("primary", Turn(tool_calls=twice), Turn(text="Two tickets are open."))
    turn = rig.turn("Open two tickets for my broken login")
    turn.tool_journal = _journal([entry])
    result = await rig.pipeline.handle(turn)
    assert [(c["result"], c.get("replayed", False), c.get("repeated", False)) for c in result.tool_calls] == [
        ({"ticket": "T-9"}, True, False), ({"ticket": "T-9"}, False, True)]
    assert sample_tools.TICKETS == []


async def test_a_replayed_result_that_was_cut_is_not_cut_again(openai_fake) -> None:
    cut, _ = bounded_result(await sample_tools.huge(None))
    entry = {"name": "huge", "arguments": {}, "result": cut, "error": None, "escalate": None}

    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [_tool("huge")]}])
    openai_fake.script("primary", Turn(tool_calls=(ToolCallSpec("huge", {}, id="h1"),)),
                       Turn(text="Plus costs $6 per month [1]."))
    turn = rig.turn("How much is Plus?")
    turn.tool_journal = _journal([entry])
    result = await rig.pipeline.handle(turn)
    assert result.tool_calls[0]["result"] == cut
    assert result.tool_calls[0]["result"]["truncated"].startswith(f"the first {DEFAULT_RESULT_CHARS:,} of ")


async def test_a_python_tool_reads_its_calls_idempotency_key(openai_fake) -> None:
    rig = make_rig(openai_fake, bots=[{"name": "acme", "tools": [_tool("call_key"), _tool("call_key_sync")]}])
    openai_fake.script("primary", Turn(tool_calls=(ToolCallSpec("call_key", {}, id="k1"),
                                                   ToolCallSpec("call_key_sync", {}, id="k3"))), Turn(text="Done."))
    turn = rig.turn("Open a ticket")
    turn.tool_journal = _journal(seed="7:2026-12-03T12:00:00+00:00:web/s/m7")
    result = await rig.pipeline.handle(turn)
    expected = _journal(seed="7:2026-12-03T12:00:00+00:00:web/s/m7")
    assert [c["result"] for c in result.tool_calls] == [{"key": expected.key("call_key", {})},
                                                       {"key": expected.key("call_key_sync", {})}]
    # Outside a message (no journal) there is no key to give.
    openai_fake.script("primary", Turn(tool_calls=(ToolCallSpec("call_key", {}, id="k2"),)), Turn(text="Done."))
    assert (await rig.pipeline.handle(rig.turn("Open a ticket"))).tool_calls[0]["result"] == {"key": None}
