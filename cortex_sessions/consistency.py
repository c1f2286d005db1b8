"""Read-your-writes positions for reads on streaming replicas (docs/design.md §17.2).

:class:`cortex_sessions.routers.ReplicaRouter` sends a read to a replica only when that replica
has replayed everything the caller wrote. "The caller" is the current context: a thread (or an
asyncio task), narrowed to one API request by :func:`consistency_context`, which the API enters
with the position an API client sends back in the ``X-Cortex-Consistency-Token`` header.

After each write the app remembers the primary's write-ahead log (WAL) position for the caller:
:func:`remember_write` marks the database as written (the router calls it from
``db_for_write``, so every ORM write and every service write is marked), and the position is
read (``pg_current_wal_lsn()``, one query) only when it is needed and the write has committed:
by the next routed read outside a transaction, or by the API before it answers.

A token is the position as PostgreSQL prints it, ``"<hex>/<hex>"`` (e.g. ``"0/3000148"``).
On another database than PostgreSQL there is no position to compare: a caller that wrote
reads from the primary until its context ends.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from functools import partial

from django.db import DatabaseError, connections, transaction

__all__ = [
    "TOKEN_HEADER",
    "Position",
    "consistency_context",
    "current_position",
    "format_lsn",
    "note_replica_used",
    "parse_lsn",
    "parse_token",
    "primary_reads",
    "reads_pinned_to_primary",
    "remember_write",
    "replica_used",
    "token",
    "write_position",
]

#: The HTTP header carrying a consistency token, in requests and in responses (docs/design.md
#: §17.2).
TOKEN_HEADER = "X-Cortex-Consistency-Token"

_LSN = re.compile(r"([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})")


@dataclass(frozen=True)
class Position:
    """What the current caller wrote, as far as the router must know.

    Attributes:
        lsn: the highest primary WAL position (bytes, as an integer) the caller's writes are
            known to end at; ``None`` when none is known.
        pending: aliases written to since their position was last read.
        unknown: the caller wrote where no position can be read (not PostgreSQL), or sent a
            malformed token: its reads go to the primary.
    """

    lsn: int | None = None
    pending: frozenset[str] = frozenset()
    unknown: bool = False


_NOTHING = Position()
_position: ContextVar[Position] = ContextVar("cortex_sessions_position", default=_NOTHING)
_pinned: ContextVar[bool] = ContextVar("cortex_sessions_primary_reads", default=False)
_replica_used: ContextVar[str | None] = ContextVar("cortex_sessions_replica_used", default=None)


def parse_lsn(text: str) -> int:
    """``"16/B374D848"`` → ``0x16B374D848``.

    Raises:
        ValueError: ``text`` is not a PostgreSQL WAL position.
    """
    match = _LSN.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"not a WAL position: {text!r}")
    return (int(match[1], 16) << 32) | int(match[2], 16)


def format_lsn(lsn: int) -> str:
    """The inverse of :func:`parse_lsn`: ``0x16B374D848`` → ``"16/B374D848"``."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_token(value: str | None) -> Position:
    """The position a client's ``X-Cortex-Consistency-Token`` names: none for a missing or
    blank header, ``unknown`` (reads from the primary, never stale) for a malformed one."""
    if value is None or not value.strip():
        return Position()
    try:
        return Position(lsn=parse_lsn(value))
    except ValueError:
        return Position(unknown=True)


def _mark(using: str) -> None:
    position = _position.get()
    if using not in position.pending:
        _position.set(replace(position, pending=position.pending | {using}))


def remember_write(using: str) -> None:
    """Note that the caller writes to database ``using`` (docs/design.md §17.2).

    The position is read later (:func:`write_position`). Inside a transaction the mark is made
    again when it commits, so a position read between the mark and the commit never stands
    for the commit.

    Args:
        using: a database alias.
    """
    _mark(using)
    connection = connections[using]
    if connection.in_atomic_block:
        transaction.on_commit(partial(_mark, using), using=using)


def _in_transaction(using: str) -> bool:
    connection = connections[using]
    return connection.in_atomic_block or not connection.get_autocommit()


def write_position(using: str) -> Position:
    """The caller's position, with the writes to ``using`` made since it was last read
    resolved when they have committed (one ``SELECT pg_current_wal_lsn()`` on ``using``).

    Args:
        using: the primary's alias.

    Returns:
        The :class:`Position`; ``pending`` still holds ``using`` while its transaction is open
        or when its position could not be read (the router then reads from the primary).
    """
    position = _position.get()
    if using not in position.pending or _in_transaction(using):
        return position
    connection = connections[using]
    if connection.vendor != "postgresql":
        position = replace(position, pending=position.pending - {using}, unknown=True)
    else:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_current_wal_lsn()::text")
                row = cursor.fetchone()
        except DatabaseError:
            return position  # still pending: the primary serves the caller's reads
        lsn = parse_lsn(row[0]) if row and row[0] else None
        best = max(filter(None, (position.lsn, lsn)), default=None)
        position = replace(position, lsn=best, pending=position.pending - {using})
    _position.set(position)
    return position


def token(using: str) -> str | None:
    """The caller's position as a token for ``X-Cortex-Consistency-Token`` (``None`` when it
    wrote nothing it can name)."""
    position = write_position(using)
    return None if position.lsn is None else format_lsn(position.lsn)


@contextmanager
def consistency_context(
    sent: str | None = None, *, position: Position | None = None
) -> Iterator[None]:
    """Run a block as its own caller (one API request), starting from the token a client
    ``sent`` (see :func:`parse_token`), or from ``position``; the thread's own position is
    back afterwards."""
    position_token = _position.set(parse_token(sent) if position is None else position)
    used_token = _replica_used.set(None)
    try:
        yield
    finally:
        _replica_used.reset(used_token)
        _position.reset(position_token)


def current_position() -> Position:
    """The caller's position as known now (nothing is read)."""
    return _position.get()


@contextmanager
def primary_reads() -> Iterator[None]:
    """Context manager and decorator: every read the router routes inside it goes to the
    primary (the admin, the management commands, a retry after a replica failed)."""
    pinned = _pinned.set(True)
    try:
        yield
    finally:
        _pinned.reset(pinned)


def reads_pinned_to_primary() -> bool:
    """Whether the current code runs inside :class:`primary_reads`."""
    return _pinned.get()


def note_replica_used(alias: str) -> None:
    """Remember that the router sent a read of the current caller to replica ``alias``."""
    _replica_used.set(alias)


def replica_used() -> str | None:
    """The replica the router last sent a read of the current caller to, if any."""
    return _replica_used.get()
