from __future__ import annotations

import pytest
from django.db import connection

from cortex_sessions.scope import Scope
from tests.factories import MessageFactory, SessionFactory

#: marker -> (the database vendors it runs on, why it is skipped elsewhere)
VENDOR_MARKERS = {
    "postgres_only": ({"postgresql"}, "needs PostgreSQL (set DATABASE_URL)"),
    "mysql_only": ({"mysql"}, "needs MySQL or MariaDB (set DATABASE_URL)"),
    "concurrent_db": (
        {"postgresql", "mysql"},
        "needs real concurrent transactions: PostgreSQL or MySQL/MariaDB (set DATABASE_URL)",
    ),
}


def pytest_collection_modifyitems(config, items):
    """Skip the tests whose vendor marker (``VENDOR_MARKERS``) excludes this run's database."""
    for marker, (vendors, reason) in VENDOR_MARKERS.items():
        if connection.vendor in vendors:
            continue
        skip = pytest.mark.skip(reason=reason)
        for item in items:
            if marker in item.keywords:
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
