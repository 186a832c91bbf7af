"""A PostgreSQL server that refuses every login with `password authentication failed` (SQLSTATE 28P01), as one
with a wrong password in database_url does: the local test server trusts every login, so it cannot show that."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import threading
from collections.abc import Iterator

REFUSAL = b'SFATAL\x00VFATAL\x00C28P01\x00Mpassword authentication failed for user "gateway"\x00\x00'


async def _refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:  # an SSL or GSSAPI request first is answered "no"; then the startup message
            length = struct.unpack("!I", await reader.readexactly(4))[0]
            body = await reader.readexactly(length - 4)
            if struct.unpack("!I", body[:4])[0] not in (80877103, 80877104):
                break
            writer.write(b"N")
            await writer.drain()
        writer.write(b"R" + struct.pack("!II", 8, 3))  # AuthenticationCleartextPassword
        await writer.drain()
        await reader.readexactly(1)  # the password message
        await reader.readexactly(struct.unpack("!I", await reader.readexactly(4))[0] - 4)
        writer.write(b"E" + struct.pack("!I", len(REFUSAL) + 4) + REFUSAL)
        await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


@contextlib.contextmanager
def refusing_postgres() -> Iterator[int]:
    """Serve in a thread of its own (the CLI runs its own event loop); yields the port on 127.0.0.1."""
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(asyncio.start_server(_refuse, "127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        server.close()
        loop.close()
