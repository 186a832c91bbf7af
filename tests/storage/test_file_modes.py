"""Files that hold transcripts or grant access are created readable by their owner only, whatever the umask."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

from gateway.admin_client import admin_files
from gateway.app import create_app
from gateway.settings import load_settings
from storage.engine import create_engine
from tests.conftest import upgrade, write_config


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_a_new_sqlite_database_and_the_admin_token_are_owner_only(tmp_path):
    old = os.umask(0o022)  # the usual default: files readable by everyone
    try:
        engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'var' / 'new.db'}")
        assert not (tmp_path / "var").exists()  # made at the first connection, not before
        async with engine.connect():
            pass
        await engine.dispose()
        assert _mode(tmp_path / "var" / "new.db") == 0o600
        existing = tmp_path / "kept.db"
        existing.touch(mode=0o640)
        await create_engine(f"sqlite+aiosqlite:///{existing}").dispose()
        assert _mode(existing) == 0o640  # an existing file's mode is its owner's choice

        settings = load_settings(write_config(tmp_path, bots=[{"name": "acme"}]))
        await asyncio.to_thread(upgrade, settings.database_url)
        app = create_app(settings, start_scheduler=False)
        async with app.router.lifespan_context(app):
            token = admin_files(settings.qdrant.path)[0]
            assert _mode(token) == 0o600 and token.read_text() == app.state.services.admin_token
    finally:
        os.umask(old)
