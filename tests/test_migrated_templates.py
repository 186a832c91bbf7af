"""The suite's own migrated-database copies (tests/conftest.py): what a developer without PostgreSQL gets."""

from __future__ import annotations

import pytest

import tests.conftest as shared


@pytest.fixture
def no_postgres_outside_ci(monkeypatch):
    """A run outside CI whose PostgreSQL does not answer (nothing listens on this port), no template made yet."""
    monkeypatch.setattr(shared, "IN_CI", False)
    monkeypatch.setattr(shared, "POSTGRES_ADMIN_URL", "postgresql://root@127.0.0.1:18391/test")
    monkeypatch.setattr(shared, "_templates", {})


def test_a_migrated_postgres_copy_is_none_without_a_server_outside_ci(no_postgres_outside_ci):
    """Outside CI a storage test's PostgreSQL case is skipped when the server is down, as `postgres_url`'s is;
    the copy of the migrated template raised RuntimeError, and each such test was an error."""
    assert shared.migrated_postgres_copy() is None
    assert "postgres" not in shared._templates


def test_a_migrated_postgres_copy_without_a_server_fails_under_ci(no_postgres_outside_ci, monkeypatch):
    """Under CI=true an unreachable server still fails the test."""
    monkeypatch.setattr(shared, "IN_CI", True)
    with pytest.raises(pytest.fail.Exception, match="PostgreSQL is required under CI=true"):
        shared.migrated_postgres_copy()
