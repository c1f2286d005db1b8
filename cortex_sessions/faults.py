"""Which database errors are faults of the moment rather than bugs (docs/design.md §12.3).

A lock or statement timeout, a lost or killed connection, a serialization failure or a deadlock
rolls the transaction back and leaves nothing half-written; the same request sent again a
moment later may well succeed. :func:`is_transient_database_error` tells these apart from
errors a retry cannot fix (a missing table, a constraint the code failed to check), which stay
500s so they are seen and fixed.
"""

from __future__ import annotations

from typing import Any

from django.db import DatabaseError, IntegrityError, InterfaceError, OperationalError

__all__ = [
    "RETRY_AFTER_SECONDS",
    "commit_was_refused",
    "is_answer_lost",
    "is_deadlock",
    "is_lock_wait_timeout",
    "is_out_of_range",
    "is_transient_database_error",
]

#: Seconds a client is asked to wait (``Retry-After``) after a transient database fault.
RETRY_AFTER_SECONDS = 1

#: PostgreSQL SQLSTATE classes and codes of transient faults: connection exceptions (08),
#: transaction rollback — serialization failure, deadlock (40), insufficient resources (53),
#: lock not available (55P03), query canceled by ``statement_timeout`` (57014), and the
#: server shutting down or terminating the backend (57P01–57P03).
_PG_TRANSIENT_CLASSES = ("08", "40", "53")
_PG_TRANSIENT_CODES = frozenset({"55P03", "57014", "57P01", "57P02", "57P03"})

#: MySQL/MariaDB error numbers of transient faults: lock wait timeout (1205), deadlock (1213),
#: server gone away / lost connection (2006, 2013), the connection killed (1927, MariaDB), query
#: interrupted or past MySQL's ``max_execution_time`` or MariaDB's ``max_statement_time`` (1317,
#: 3024, 1969), too many connections (1040).
_MYSQL_TRANSIENT_ERRNOS = frozenset({1040, 1205, 1213, 1317, 1927, 1969, 2006, 2013, 3024})

#: SQLite messages of transient faults: another connection holds the write lock.
_SQLITE_TRANSIENT_TEXT = ("database is locked", "database table is locked")


#: Deadlocks and serialization failures: PostgreSQL SQLSTATEs, MySQL/MariaDB ER_LOCK_DEADLOCK.
_DEADLOCK_SQLSTATES = frozenset({"40P01", "40001"})
_DEADLOCK_ERRNOS = frozenset({1213})


def _sqlstate(cause: BaseException) -> str | None:
    """The SQLSTATE of a driver error: psycopg 3's ``sqlstate``, psycopg 2's ``pgcode`` (both
    also as ``diag.sqlstate``); ``None`` for an error without one (MySQL, SQLite, a lost
    connection)."""
    for value in (
        getattr(cause, "sqlstate", None),
        getattr(cause, "pgcode", None),
        getattr(getattr(cause, "diag", None), "sqlstate", None),
    ):
        if isinstance(value, str) and value:
            return value
    return None


def _is_one_of(exc: BaseException, sqlstates: frozenset[str], errnos: frozenset[int]) -> bool:
    """Whether ``exc`` (a Django ``DatabaseError``, inspected with its ``__cause__``) carries
    one of PostgreSQL's ``sqlstates`` or, without a SQLSTATE, one of MySQL/MariaDB's
    ``errnos``."""
    if not isinstance(exc, DatabaseError):
        return False
    cause = exc.__cause__ or exc
    sqlstate = _sqlstate(cause)
    if sqlstate:
        return sqlstate in sqlstates
    args: tuple[Any, ...] = getattr(cause, "args", ())
    return bool(args) and args[0] in errnos


def is_deadlock(exc: BaseException) -> bool:
    """Whether the database rolled ``exc``'s transaction back to break a deadlock (or a
    serialization failure), so that running the same transaction again is safe and expected.

    InnoDB (MySQL, MariaDB) reports such cycles between writers of one unique index far more
    often than PostgreSQL: it locks index entries, delete-marked ones included, not only the
    rows a statement matches (docs/design.md §15).

    Args:
        exc: any exception; a Django ``DatabaseError`` is inspected with its ``__cause__``.

    Returns:
        ``True`` for a deadlock or serialization failure, else ``False``.
    """
    return _is_one_of(exc, _DEADLOCK_SQLSTATES, _DEADLOCK_ERRNOS)


#: Waits that gave up: PostgreSQL ``lock_not_available`` (``lock_timeout``) and
#: ``query_canceled`` (``statement_timeout``); MySQL/MariaDB lock wait timeout (1205) and the
#: statement time limits (1969 MariaDB ``max_statement_time``, 3024 MySQL
#: ``max_execution_time``).
_WAIT_SQLSTATES = frozenset({"55P03", "57014"})
_WAIT_ERRNOS = frozenset({1205, 1969, 3024})


def is_lock_wait_timeout(exc: BaseException) -> bool:
    """Whether ``exc`` is a statement that gave up waiting: a lock wait or statement timeout.

    Args:
        exc: any exception; a Django ``DatabaseError`` is inspected with its ``__cause__``.

    Returns:
        ``True`` for PostgreSQL ``lock_timeout``/``statement_timeout`` cancellations and the
        MySQL/MariaDB lock wait and statement time limits; else ``False``.
    """
    return _is_one_of(exc, _WAIT_SQLSTATES, _WAIT_ERRNOS)


#: A value past its column's range: PostgreSQL ``numeric_value_out_of_range`` (a ``numeric``
#: field or ``bigint`` overflow); MySQL/MariaDB out of range value (1264) and BIGINT value out
#: of range (1690).
_RANGE_SQLSTATES = frozenset({"22003"})
_RANGE_ERRNOS = frozenset({1264, 1690})


def is_out_of_range(exc: BaseException) -> bool:
    """Whether ``exc`` is the database refusing a number its column (or arithmetic type)
    cannot hold, e.g. a session's usage total pushed past ``numeric(20, 6)`` or ``bigint``
    (docs/design.md §16.1). Not transient: the same write fails again.

    Args:
        exc: any exception; a Django ``DatabaseError`` is inspected with its ``__cause__``.

    Returns:
        ``True`` for PostgreSQL SQLSTATE 22003 and MySQL/MariaDB errors 1264 and 1690; else
        ``False``.
    """
    return _is_one_of(exc, _RANGE_SQLSTATES, _RANGE_ERRNOS)


def is_transient_database_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a database fault that a retry may not meet again.

    Args:
        exc: any exception; Django's wrapped ``DatabaseError`` subclasses are inspected
            together with the driver error they wrap (``__cause__``).

    Returns:
        ``True`` for lock and statement timeouts, lost or killed connections, serialization
        failures and deadlocks on PostgreSQL, MySQL/MariaDB and SQLite; ``False`` otherwise
        (including every error that is not a ``django.db.DatabaseError``).
    """
    if not isinstance(exc, DatabaseError):
        return False
    if isinstance(exc, InterfaceError):
        return True  # the connection is closed or unusable
    cause = exc.__cause__ or exc
    sqlstate = _sqlstate(cause)
    if sqlstate:
        return sqlstate in _PG_TRANSIENT_CODES or sqlstate[:2] in _PG_TRANSIENT_CLASSES
    args = getattr(cause, "args", ())
    if args and isinstance(args[0], int):
        return args[0] in _MYSQL_TRANSIENT_ERRNOS
    text = str(cause).lower()
    if any(fragment in text for fragment in _SQLITE_TRANSIENT_TEXT):
        return True
    # psycopg raises a bare OperationalError without SQLSTATE when the server closed the
    # connection (killed backend, restart, network loss).
    module = type(cause).__module__ or ""
    return isinstance(exc, OperationalError) and module.startswith("psycopg") and sqlstate is None


def commit_was_refused(exc: BaseException) -> bool:
    """Whether an error raised while committing a transaction means the database refused the
    commit, so that nothing of the transaction is stored (docs/design.md §12.3).

    The database answers a COMMIT it refuses with an error: a deferred constraint violated, a
    serialization failure or deadlock, SQLite's write lock held by another connection. Any other
    error while committing — above all a lost or killed connection, or a fault while Django
    restores autocommit after the COMMIT — leaves the outcome unknown: the COMMIT may have
    reached the server and been carried out.

    Args:
        exc: an exception raised by ``connection.commit()`` or ``set_autocommit(True)``.

    Returns:
        ``True`` for an integrity error, a deadlock or serialization failure
        (:func:`is_deadlock`) or SQLite's "database is locked"; ``False`` otherwise.
    """
    if isinstance(exc, IntegrityError) or is_deadlock(exc):
        return True
    text = str(exc.__cause__ or exc).lower()
    module = type(exc.__cause__ or exc).__module__ or ""
    return module.startswith("sqlite3") and any(f in text for f in _SQLITE_TRANSIENT_TEXT)


def is_answer_lost(exc: BaseException) -> bool:
    """Whether the connection failed without the server's answer to the statement in flight:
    psycopg's bare ``OperationalError`` (no SQLSTATE: the server closed the connection, the
    network failed). A statement sent in autocommit mode may then have been carried out and
    committed, or not (docs/design.md §12.3).

    Args:
        exc: any exception; a Django ``DatabaseError`` is inspected with its ``__cause__``.

    Returns:
        ``True`` for such a psycopg error; ``False`` otherwise (an error the server answered
        with means the statement, and its autocommit transaction, failed).
    """
    if not isinstance(exc, OperationalError):
        return False
    cause = exc.__cause__ or exc
    module = type(cause).__module__ or ""
    return module.startswith("psycopg") and _sqlstate(cause) is None
