"""A database_url whose password (or user) the server refuses: one line that says so, and what to check."""

from __future__ import annotations

import pytest

from gateway.cli import main
from tests.conftest import write_config
from tests.fakes.postgres_refusing import refusing_postgres


@pytest.mark.parametrize("command", [["db", "upgrade"], ["ingest-runs"], ["forget", "--channel", "web", "--user", "s1"]])
def test_a_refused_database_login_is_one_line_naming_the_password_not_an_unreachable_server(tmp_path, capsys,
                                                                                            command):
    """It said `cannot reach the database …: password authentication failed …`, which sent one to look for a server
    down, while the server answered and refused the user or password."""
    with refusing_postgres() as port:
        url = f"postgresql://gateway:wrong@127.0.0.1:{port}/gateway"
        code = main([*command, "--config", str(write_config(tmp_path, database_url=url))])
    err = capsys.readouterr().err
    assert code == 1
    assert err.strip().splitlines() == [
        f"error: the database postgresql://gateway:[REDACTED]@127.0.0.1:{port}/gateway refused the login: password "
        'authentication failed for user "gateway"; check the user and password in database_url (or DATABASE_URL)']
