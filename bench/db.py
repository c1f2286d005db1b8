"""Database helpers shared by the generator and the runner: URLs, creating databases, and
dropping/recreating a table's secondary indexes around a bulk load."""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

import psycopg

__all__ = [
    "DEFAULT_SERVER",
    "create_database",
    "database_url",
    "drop_secondary_indexes",
    "psycopg_conninfo",
    "restore_indexes",
]

#: The PostgreSQL server, without a database name.
DEFAULT_SERVER = os.environ.get("BENCH_SERVER_URL", "postgres://postgres@127.0.0.1:5432")


def database_url(name: str) -> str:
    """The URL of database ``name`` on the bench server."""
    return f"{DEFAULT_SERVER.rstrip('/')}/{name}"


def psycopg_conninfo(url: str) -> str:
    """``postgres://`` URLs work with psycopg as they are; normalise ``postgresql+driver://``."""
    parts = urlsplit(url)
    return urlunsplit(("postgresql", parts.netloc, parts.path, parts.query, parts.fragment))


def create_database(name: str, *, recreate: bool = False) -> bool:
    """Create database ``name`` (dropping it first with ``recreate``).

    Returns:
        Whether the database was created (``False``: it already existed and was kept).
    """
    with psycopg.connect(database_url("postgres"), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if exists and not recreate:
            return False
        if exists:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return True


def drop_secondary_indexes(conn: psycopg.Connection, table: str) -> list[str]:
    """Drop every index and constraint of ``table`` except its primary key and NOT NULLs.

    Returns:
        The statements that recreate them (pass to :func:`restore_indexes` after the load).
    """
    restore: list[str] = []
    constraints = conn.execute(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE conrelid = %s::regclass AND contype <> 'p' ORDER BY contype",
        [table],
    ).fetchall()
    for name, definition in constraints:
        conn.execute(f'ALTER TABLE "{table}" DROP CONSTRAINT "{name}"')
        restore.append(f'ALTER TABLE "{table}" ADD CONSTRAINT "{name}" {definition}')
    indexes = conn.execute(
        "SELECT i.indexname, i.indexdef FROM pg_indexes i "
        "WHERE i.tablename = %s AND NOT EXISTS ("
        "  SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname AND c.contype = 'p')",
        [table],
    ).fetchall()
    for name, definition in indexes:
        conn.execute(f'DROP INDEX "{name}"')
        restore.insert(0, definition)
    return restore


def restore_indexes(conn: psycopg.Connection, statements: list[str]) -> None:
    """Run the statements returned by :func:`drop_secondary_indexes`."""
    conn.execute("SET maintenance_work_mem = '256MB'")
    for statement in statements:
        conn.execute(statement)
