"""/metrics while the database is down: the gauges read from it are left out, never their last values."""

from __future__ import annotations

from storage.engine import create_engine, session_factory
from tests.conftest import app_client, docs_source
from tests.fakes.web_server import closed_port

STORE_GAUGES = ("gateway_queue_depth ", "gateway_queue_lag_seconds ", "gateway_outbox_depth ",
                "gateway_ingest_last_run_ok{", "gateway_ingest_last_run_end_timestamp_seconds{")


async def test_metrics_leave_out_what_the_database_could_not_say_and_flag_the_scrape(tmp_path) -> None:
    # The scrape swallowed the error and rendered the gauges' last values: an empty queue on the dashboard
    # while /readyz said 503 and nothing was answered.
    bot = {"name": "acme", "channels": {"web": {}}, "sources": [docs_source(tmp_path)]}
    async with app_client(tmp_path, bots=[bot], ingest=True) as client:
        up = (await client.get("/metrics")).text
        assert all(gauge in up for gauge in STORE_GAUGES) and "gateway_database_scrape_error 0.0" in up
        svc = client.services
        working = svc.sessions
        down = create_engine(f"postgresql+asyncpg://root@127.0.0.1:{closed_port()}/nothing_listens_here")
        svc.sessions = session_factory(down)  # what a stopped database looks like to the app
        try:
            assert (await client.get("/readyz")).status_code == 503
            response = await client.get("/metrics")
            assert response.status_code == 200
            assert "gateway_database_scrape_error 1.0" in response.text
            assert [gauge for gauge in STORE_GAUGES if gauge in response.text] == []
            assert "gateway_messages_in_total" in response.text  # this process's own counters still render
        finally:
            svc.sessions = working
            await down.dispose()
        back = (await client.get("/metrics")).text
        assert all(gauge in back for gauge in STORE_GAUGES) and "gateway_database_scrape_error 0.0" in back
