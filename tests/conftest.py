from __future__ import annotations

import pytest
from django.db import connection

from cortex_sessions.scope import Scope
from tests.factories import MessageFactory, SessionFactory


def pytest_collection_modifyitems(config, items):
    """Skip ``postgres_only`` tests when the suite runs on another database."""
    if connection.vendor == "postgresql":
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL (set DATABASE_URL)")
    for item in items:
        if "postgres_only" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def scope() -> Scope:
    return Scope.parse("org=acme/user=1")


@pytest.fixture
def session_factory():
    return SessionFactory


@pytest.fixture
def message_factory():
    return MessageFactory
