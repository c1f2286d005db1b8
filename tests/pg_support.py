"""PostgreSQL helpers shared by the tests of how the hot paths send their statements
(prepared or not: docs/design.md §14.2)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection


def prepared_statements() -> list[str]:
    """The text of every statement prepared on the test connection's server session."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


@contextmanager
def prepare_at_once() -> Iterator[None]:
    """Within the block psycopg prepares every statement the first time it runs (a host's
    ``prepare_threshold`` of 0); afterwards the threshold is restored and every prepared
    statement deallocated."""
    connection.ensure_connection()
    raw = connection.connection
    threshold, raw.prepare_threshold = raw.prepare_threshold, 0
    try:
        yield
    finally:
        raw.prepare_threshold = threshold
        with connection.cursor() as cursor:
            cursor.execute("DEALLOCATE ALL")
