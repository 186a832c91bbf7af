"""What `gateway forget` prints: its counts in words that agree with them, and an opt-out it kept."""

import asyncio
import json

import pytest
from sqlalchemy import select

from gateway.cli import main
from gateway.models import ConversationRef, InboundMessage, Sender
from storage import repositories as repo
from storage.engine import create_engine, session_factory
from storage.models import Contact
from storage.opt_outs import opt_out
from tests.conftest import write_config


def _conversation_of(database_url: str, *, channel: str, user: str, opted_out: bool = False, number: int = 1) -> None:
    """Message `number` of `user` in their one-to-one conversation (their contact opted out with `opted_out`). A
    message forgotten is not stored again (storage/forgotten.py): one after a forget takes a new number."""
    async def store() -> None:
        engine = create_engine(database_url)
        try:
            async with session_factory(engine)() as session, session.begin():
                await repo.store_inbound(session, bot="acme", message=InboundMessage(
                    channel=channel, external_id=f"{user}-{number}", conversation=ConversationRef(channel=channel, chat=user),
                    sender=Sender(external_id=user, display_name="Ada"), text="hello"))
                if opted_out:
                    contact = (await session.execute(select(Contact))).scalar_one()
                    await opt_out(session, bot="acme", contact_id=contact.id, at=contact.created_at)
        finally:
            await engine.dispose()

    asyncio.run(store())


def test_forget_says_one_contact_and_one_conversation_in_the_singular(tmp_path, capsys):
    """It printed "deleted 1 contacts, 1 conversations, 1 messages, 0 escalations"."""
    config = write_config(tmp_path)
    assert main(["db", "upgrade", "--config", str(config)]) == 0
    _conversation_of(f"sqlite+aiosqlite:///{tmp_path / 'gateway.db'}", channel="web", user="s1")
    capsys.readouterr()
    assert main(["forget", "--config", str(config), "--channel", "web", "--user", "s1"]) == 0
    assert capsys.readouterr().out == (
        "deleted 1 contact, 1 conversation, 1 message, 0 escalations (recorded in data_deletions)\n")


def test_forget_says_it_kept_the_opt_out_of_a_contact_who_sent_stop(tmp_path, capsys):
    """A contact who opted out is kept as that opt-out: the output said "deleted 0 contacts" and not a word of
    the row left, which a person handling a deletion request must be able to tell the requester about."""
    config = write_config(tmp_path)
    assert main(["db", "upgrade", "--config", str(config)]) == 0
    _conversation_of(f"sqlite+aiosqlite:///{tmp_path / 'gateway.db'}", channel="whatsapp", user="15550001",
                     opted_out=True)
    capsys.readouterr()
    assert main(["forget", "--config", str(config), "--channel", "whatsapp", "--user", "15550001", "--json"]) == 0
    # --json keeps its four counts: scripts read it (the opt-out is in the data_deletions row's counts).
    assert json.loads(capsys.readouterr().out) == {"contacts": 0, "conversations": 1, "messages": 1, "escalations": 0}
    _conversation_of(f"sqlite+aiosqlite:///{tmp_path / 'gateway.db'}", channel="whatsapp", user="15550001", number=2)
    assert main(["forget", "--config", str(config), "--channel", "whatsapp", "--user", "15550001"]) == 0
    assert capsys.readouterr().out == (
        "deleted 0 contacts, 1 conversation, 1 message, 0 escalations; kept 1 opt-out (WhatsApp STOP) "
        "(recorded in data_deletions)\n")


@pytest.mark.parametrize(("channel", "user"), [("web", "f3a9c2e87b1d4c5e9a0b"), ("whatsapp", "14155550123"),
                                               ("telegram", "100200300")])
def test_forget_log_line_says_whether_anyone_was_found_and_not_who(tmp_path, capsys, channel, user):
    """`retention.forgot_contact` for a user id nobody has said only `channel=web`: whether the id was mistyped,
    or the person really had nothing stored, could not be told from the log. Who was asked for stays out of it,
    as out of the audit row: the log would keep who wanted to be forgotten."""
    config = write_config(tmp_path, log_level="INFO")
    assert main(["db", "upgrade", "--config", str(config)]) == 0
    capsys.readouterr()
    assert main(["forget", "--config", str(config), "--channel", channel, "--user", user]) == 0
    line = next(line for line in capsys.readouterr().err.splitlines() if "retention.forgot_contact" in line)
    assert f"channel={channel}" in line and "found=False" in line and user[-4:] not in line, line

    _conversation_of(f"sqlite+aiosqlite:///{tmp_path / 'gateway.db'}", channel=channel, user=user)
    assert main(["forget", "--config", str(config), "--channel", channel, "--user", user]) == 0
    line = next(line for line in capsys.readouterr().err.splitlines() if "retention.forgot_contact" in line)
    assert "found=True" in line and "contacts=1" in line and user[-4:] not in line, line


def test_forget_of_a_user_id_nobody_has_says_so_on_stderr(tmp_path, capsys):
    """A mistyped id printed "deleted 0 contacts, …" and exit 0, as a done job: the typo went unseen (for the
    web chat, the id is the session id, not the conversation's number)."""
    config = write_config(tmp_path)
    assert main(["db", "upgrade", "--config", str(config)]) == 0
    _conversation_of(f"sqlite+aiosqlite:///{tmp_path / 'gateway.db'}", channel="web", user="s1")
    capsys.readouterr()
    assert main(["forget", "--config", str(config), "--channel", "web", "--user", "s2"]) == 0
    out, err = capsys.readouterr()
    assert out == "deleted 0 contacts, 0 conversations, 0 messages, 0 escalations (recorded in data_deletions)\n"
    assert ("note: no web contact has the user id 's2', so nothing was deleted (for the web chat, the user id is "
            "the session_id)") in err
    assert main(["forget", "--config", str(config), "--channel", "web", "--user", "s1"]) == 0
    assert "note:" not in capsys.readouterr().err


def test_forget_of_a_user_known_only_by_a_removed_chat_mark_does_not_say_nothing_was_deleted(tmp_path, capsys):
    """A person who blocked the bot leaves a `removed_chats` mark under their private chat's id, which forget
    deletes; the note "no telegram contact has the user id …, so nothing was deleted" printed all the same, as
    the mark was counted nowhere, and the log line said `found=False`. Stdout and `--json` stay the four counts."""
    from datetime import UTC, datetime

    from storage.removed_chats import mark_removed

    config = write_config(tmp_path, log_level="INFO")
    assert main(["db", "upgrade", "--config", str(config)]) == 0

    async def mark() -> None:
        engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'gateway.db'}")
        try:
            async with session_factory(engine)() as session, session.begin():
                await mark_removed(session, bot="acme", channel="telegram", chat="100200300", removed=True,
                                   at=datetime.now(UTC))
        finally:
            await engine.dispose()

    asyncio.run(mark())
    capsys.readouterr()
    assert main(["forget", "--config", str(config), "--channel", "telegram", "--user", "100200300", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == {"contacts": 0, "conversations": 0, "messages": 0, "escalations": 0}
    assert "note:" not in err, err
    line = next(line for line in err.splitlines() if "retention.forgot_contact" in line)
    assert "found=True" in line and "removed_chats=1" in line and "100200300" not in line, line
    # Once it is gone, nothing is left to find: the note is back.
    assert main(["forget", "--config", str(config), "--channel", "telegram", "--user", "100200300"]) == 0
    out, err = capsys.readouterr()
    assert out == "deleted 0 contacts, 0 conversations, 0 messages, 0 escalations (recorded in data_deletions)\n"
    assert "note: no telegram contact has the user id '100200300', so nothing was deleted" in err
