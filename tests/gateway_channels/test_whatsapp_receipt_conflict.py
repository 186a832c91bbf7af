"""A Twilio status callback whose store PostgreSQL aborts for a deadlock is stored once and answered 200, through
the real route on PostgreSQL: Twilio does not retry a status callback, so a 500 lost the receipt.

The abort is PostgreSQL's own (tests/storage/test_conflicts.py): a trigger raises SQLSTATE 40P01 the first time
a reply's part is updated, as the deadlock detector would, through the real driver and SQLAlchemy."""

from __future__ import annotations

from sqlalchemy import text
from structlog.testing import capture_logs

from tests.gateway_channels.conftest import deliveries, early_receipts, get_message
from tests.gateway_channels.whatsapp_rig import answered, post, status, whatsapp_app
from tests.storage.test_conflicts import abort_first


async def test_whatsapp_receipt_aborted_for_a_deadlock_is_stored_once_on_postgres(tmp_path, postgres_url):
    async with whatsapp_app(tmp_path, database_url=postgres_url) as (client, services, fake):
        _, reply_id, sid = await answered(client, services, fake, "SM" + "d" * 32, "+15550000440")
        async with services.sessions() as session, session.begin():
            await abort_first(session, times=1, table="deliveries", event="UPDATE")
        with capture_logs() as logs:
            acknowledged = await post(client, status(sid, "delivered"))
        assert acknowledged.status_code == 200
        assert (await get_message(services, reply_id)).status == "delivered"
        assert [d.status for d in await deliveries(services, reply_id)] == ["delivered"]
        assert await early_receipts(services) == []  # applied to its part, not parked for a send never recorded
        async with services.sessions() as session:
            assert (await session.execute(text("SELECT last_value FROM deliveries_tried"))).scalar_one() == 2  # aborted once, then written once
        retried = [e for e in logs if e["event"] == "db.conflict_retried"]
        assert [(e["what"], e["attempt"], e["sqlstate"]) for e in retried] == [("receipt", 1, "40P01")]
