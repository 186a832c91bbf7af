"""Several real server processes on one PostgreSQL: every webhook answered once, in order, despite
duplicate deliveries to different replicas and one replica SIGKILLed mid-run (a reply in flight at the
kill may be sent twice: the documented at-least-once window)."""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections import defaultdict

import httpx

from tests.fakes.telegram_api import FakeTelegramAPI
from tests.scale.replicas import SECRET, TOKEN, Replica, db_upgrade, replica_config, telegram_update

CHATS = 6
PER_CHAT = 5


async def _post(client: httpx.AsyncClient, replicas: list[Replica], update: dict, *, copies: int) -> int:
    """Deliver one update to `copies` live replicas at once, like Telegram retrying on another node.

    Returns how many replicas acknowledged it; a replica that is being killed may refuse the connection,
    and then the update goes to another one (Telegram keeps retrying until some replica answers 200).
    """
    acked = 0
    while acked == 0:
        live = [r for r in replicas if r.proc.poll() is None]
        targets = random.sample(live, min(copies, len(live)))
        results = await asyncio.gather(*[
            client.post(f"{r.url}/webhooks/shop/telegram", json=update, timeout=10,
                        headers={"X-Telegram-Bot-Api-Secret-Token": SECRET}) for r in targets],
            return_exceptions=True)
        acked = sum(1 for res in results if isinstance(res, httpx.Response) and res.status_code == 200)
        if acked == 0:
            await asyncio.sleep(0.1)
    return acked


async def _until_answered(fake: FakeTelegramAPI, expected: dict[int, list[int]], replicas: list[Replica], what: str,
                          timeout: float = 180.0) -> None:
    """Until every expected message has a reply; on timeout, fail naming the (chat, update) pairs unanswered."""
    deadline = time.monotonic() + timeout
    while True:
        answered = {(int(sent.chat_id), sent.reply_to) for sent in fake.sent}
        missing = [(chat, u) for chat, us in expected.items() for u in us if (chat, u) not in answered]
        if not missing:
            return
        if time.monotonic() > deadline:
            logs = "\n".join(r.log() for r in replicas)
            raise AssertionError(f"{what}: no reply within {timeout:.0f} s to (chat, update) {missing}\n{logs}")
        await asyncio.sleep(0.2)


async def test_replicas_answer_each_message_once_in_order_with_a_replica_killed(postgres_url, tmp_path) -> None:
    async with FakeTelegramAPI(TOKEN) as fake:
        configs = [replica_config(tmp_path, database_url=postgres_url, telegram_api=fake.base_url, index=i)
                   for i in range(3)]
        await asyncio.to_thread(db_upgrade, configs[0])
        replicas = [Replica(c) for c in configs]
        for replica in replicas:
            replica.start()
        try:
            await asyncio.gather(*(r.wait_ready() for r in replicas))
            victim = replicas[0]
            expected: dict[int, list[int]] = defaultdict(list)
            acked_total = 0

            async def chat(client: httpx.AsyncClient, chat_id: int) -> None:
                nonlocal acked_total
                for k in range(PER_CHAT):
                    update_id = chat_id * 100 + k
                    expected[chat_id].append(update_id)
                    update = telegram_update(update_id, chat_id=chat_id, text=f"question {k} from {chat_id}")
                    # In order within a chat: the next message is sent only once this one is acknowledged.
                    await _post(client, replicas, update, copies=2)
                    acked_total += 1
                    await asyncio.sleep(random.uniform(0, 0.15))
                # A late redelivery of every update of the chat, to any replica: must be a no-op.
                for update_id in expected[chat_id]:
                    await _post(client, replicas, telegram_update(update_id, chat_id=chat_id, text="again"), copies=1)

            async def killer() -> None:
                while acked_total < CHATS * PER_CHAT // 3:
                    await asyncio.sleep(0.02)
                victim.kill()

            async with httpx.AsyncClient() as client:
                await asyncio.gather(killer(), *(chat(client, 9000 + c) for c in range(CHATS)))
            assert victim.proc.returncode is not None and victim.proc.returncode < 0  # really SIGKILLed

            await _until_answered(fake, expected, replicas, "the messages")
            # One more message per chat, answered only after every earlier message of its chat (in order),
            # so after the dead replica's lease expired and what it held was answered again: a double
            # answer is stored before this one is, and no fixed wait can fall short under load.
            async with httpx.AsyncClient() as client:
                for chat_id in expected:
                    update_id = chat_id * 100 + PER_CHAT
                    expected[chat_id].append(update_id)
                    await _post(client, replicas, telegram_update(update_id, chat_id=chat_id, text="last one"),
                                copies=1)
            await _until_answered(fake, expected, replicas, "each chat's last message (sent after the others)")
        finally:
            for replica in replicas:
                replica.stop()

        replies: dict[int, list[int]] = defaultdict(list)
        for sent in fake.sent:
            replies[int(sent.chat_id)].append(sent.reply_to)
        logs = "\n".join(r.log() for r in replicas[1:])
        # Exactly once, except the one documented window (README, "Exactly once"): a reply the victim was
        # sending when it was killed may have reached the platform, and is sent again once requeued. Such
        # a repeat comes right after itself (the next reply waits for it), and there are at most as many
        # as the replies requeued from the dead worker. Nothing else may repeat, and order must hold.
        requeued = sum(int(n) for n in re.findall(r"requeued_from_dead_worker count=(\d+)", logs))
        once = {chat: [u for i, u in enumerate(us) if i == 0 or us[i - 1] != u] for chat, us in replies.items()}
        repeats = sum(len(v) for v in replies.values()) - sum(len(v) for v in once.values())
        assert once == dict(expected), (dict(replies), logs)
        assert repeats <= requeued, (dict(replies), logs)
