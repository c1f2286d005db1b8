"""What one message search may cost: query shape limits and ``SEARCH_TIMEOUT``
(docs/design.md §11.5, docs/search.md "Limits").

Two bounds, each for what the other cannot catch:

- **Query shape.** ``q`` holds at most :data:`MAX_QUERY_WORDS` words (runs of characters other
  than spaces, tabs and line breaks). PostgreSQL's ``ts_headline`` is super-linear in the
  query's operands: with a query of *n* copies of one word over a text holding it, each
  doubling of *n* costs about nine times as much (80 copies ≈ 0.8 s per snippet, 199 copies
  about a minute per request), and with several words joined by AND (or a phrase) it searches
  for covers across the whole text, seconds for one 100,000-character message. So the snippet
  is made with :func:`headline_query_sql`: the query's *distinct* lexemes, at most
  :data:`MAX_HEADLINE_TERMS`, joined by OR, which ``ts_headline`` handles in one pass; matching
  and ranking still use the query as written.
- **Time.** Every search statement runs under a timeout of ``SEARCH_TIMEOUT`` seconds
  (:func:`search_timeout`): PostgreSQL's ``statement_timeout``, set for the statement's own
  transaction or savepoint; on SQLite a progress handler interrupts the statement. A statement
  past it is cancelled and :class:`~cortex_sessions.exceptions.SearchTimeout` raised (the API's
  503 ``search_timeout``); the connection stays usable. MySQL/MariaDB refuse ``q`` (400), so
  nothing runs there.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import DatabaseError, connections, transaction

from .exceptions import SearchTimeout

__all__ = [
    "MAX_HEADLINE_TERMS",
    "MAX_QUERY_WORDS",
    "QUERY_PATTERN",
    "headline_query_sql",
    "query_words",
    "search_timeout",
    "timeout_milliseconds",
    "too_many_words_message",
]

#: Most words a query may hold (a word: a run of characters other than spaces, tabs and line
#: breaks; ``or``, ``-`` and quoted words count as written).
MAX_QUERY_WORDS = 16
#: Most distinct lexemes of a query that ``ts_headline`` marks (a hyphenated or dotted word
#: parses into several: ``a-b-c`` is ``a-b-c``, ``a``, ``b``, ``c``).
MAX_HEADLINE_TERMS = 32
#: PostgreSQL's largest ``statement_timeout``, in milliseconds.
_MAX_TIMEOUT_MS = 2**31 - 1
#: SQLite virtual machine instructions between two looks at the clock.
_SQLITE_PROGRESS_STEPS = 1000

_BLANK_CLASS = r"\t\n\v\f\r "
#: The rules of a query as a JSON-schema (ECMA-262) pattern: 1 to :data:`MAX_QUERY_WORDS`
#: words separated and surrounded by spaces, tabs and line breaks, and no NUL.
QUERY_PATTERN = (
    f"^[{_BLANK_CLASS}]*[^\\u0000{_BLANK_CLASS}]+"
    f"(?:[{_BLANK_CLASS}]+[^\\u0000{_BLANK_CLASS}]+){{0,{MAX_QUERY_WORDS - 1}}}[{_BLANK_CLASS}]*$"
)
_WORD = re.compile(f"[^{_BLANK_CLASS}]+")


def query_words(q: str) -> int:
    """How many words ``q`` holds: runs of characters other than ASCII spaces, tabs and line
    breaks (the separators of :data:`QUERY_PATTERN`; other Unicode spaces belong to a word)."""
    return sum(1 for _ in _WORD.finditer(q))


def too_many_words_message(q: str) -> str:
    """The message refusing ``q`` for holding more than :data:`MAX_QUERY_WORDS` words."""
    return (
        f"q is {query_words(q)} words; at most {MAX_QUERY_WORDS} are allowed (words are "
        "separated by spaces; 'or', '-' and quoted words count)."
    )


def headline_query_sql(tsquery: str) -> str:
    """SQL of the query ``ts_headline`` is given for the query ``tsquery`` (an SQL expression
    of type ``tsquery``): its distinct lexemes outside negations (``querytree``), at most
    :data:`MAX_HEADLINE_TERMS`, joined by ``|``; an empty query when it has none.

    Every occurrence of any query word is then a cover, so ``ts_headline`` reads the text once
    and picks the passage with the most hits, instead of testing AND or phrase covers across
    the whole text for each repeated operand (module docstring). The lexemes are taken as the
    query printed them (quoted, quotes doubled), so nothing is normalized twice.
    """
    return (
        "(coalesce((SELECT string_agg(h.lexeme, ' | ') FROM (SELECT DISTINCT m[1] AS lexeme "
        f"FROM regexp_matches(querytree({tsquery}), '''(?:[^'']|'''')*''', 'g') AS m "
        f"LIMIT {MAX_HEADLINE_TERMS}) AS h), '')::tsquery)"
    )


def timeout_milliseconds(seconds: Any) -> int:
    """``SEARCH_TIMEOUT`` in whole milliseconds for PostgreSQL: rounded up, at least 1 (0 would
    turn the timeout off) and at most PostgreSQL's largest ``statement_timeout``."""
    return max(1, min(_MAX_TIMEOUT_MS, math.ceil(float(seconds) * 1000)))


def _is_cancel(exc: BaseException) -> bool:
    """Whether ``exc`` is a statement the database cancelled: PostgreSQL SQLSTATE 57014
    (``statement_timeout``), SQLite ``interrupted`` (the progress handler)."""
    cause = exc.__cause__ or exc
    sqlstate = getattr(cause, "sqlstate", None) or getattr(
        getattr(cause, "diag", None), "sqlstate", None
    )
    if sqlstate:
        return str(sqlstate) == "57014"
    return "interrupted" in str(cause).lower()


@contextmanager
def search_timeout(using: str, *, active: bool = True) -> Iterator[None]:
    """Run the search statements of the block under ``SEARCH_TIMEOUT`` (docs/design.md §11.5).

    PostgreSQL: the block runs in ``transaction.atomic(using=using)`` (its own transaction, or a
    savepoint inside the caller's) with ``statement_timeout`` set locally; inside a caller's
    transaction the previous value is put back when the block succeeds, and a cancelled
    statement rolls back to the savepoint, so the caller's transaction goes on. SQLite: a
    progress handler interrupts any statement of the block that runs longer (it replaces a
    handler the host installed, for the block). Other databases: nothing (they do not search).

    Args:
        using: the database alias the block's search statements read.
        active: ``False`` runs the block as it is (a read with no ``q``), so callers need no
            second copy of the block.

    Raises:
        SearchTimeout: a statement of the block ran past ``SEARCH_TIMEOUT`` and was cancelled.
    """
    from .conf import app_settings

    if not active:
        yield
        return
    connection = connections[using]
    seconds = app_settings.SEARCH_TIMEOUT
    try:
        if connection.vendor == "postgresql":
            with _postgres_timeout(using, timeout_milliseconds(seconds)):
                yield
        elif connection.vendor == "sqlite":
            with _sqlite_timeout(using, float(seconds)):
                yield
        else:
            yield
    except DatabaseError as exc:
        if connection.vendor in ("postgresql", "sqlite") and _is_cancel(exc):
            raise SearchTimeout(seconds=seconds) from exc
        raise


@contextmanager
def _postgres_timeout(using: str, milliseconds: int) -> Iterator[None]:
    connection = connections[using]
    # inside a caller's transaction (an atomic block, or autocommit turned off by hand) the
    # local setting would outlive the block: it is put back after the search
    nested = connection.in_atomic_block or not connection.get_autocommit()
    with transaction.atomic(using=using):
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT current_setting('statement_timeout'), "
                "set_config('statement_timeout', %s, true)",
                [f"{milliseconds}ms"],
            )
            row = cursor.fetchone()
        yield
        if nested and row is not None:
            with connection.cursor() as cursor:
                cursor.execute("SELECT set_config('statement_timeout', %s, true)", [row[0]])


@contextmanager
def _sqlite_timeout(using: str, seconds: float) -> Iterator[None]:
    connection = connections[using]
    connection.ensure_connection()
    raw = connection.connection
    deadline = [time.monotonic() + seconds]

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        deadline[0] = time.monotonic() + seconds  # each statement has the whole timeout
        return execute(sql, params, many, context)

    def progress() -> int:
        if time.monotonic() <= deadline[0]:
            return 0
        # Interrupt once: what runs next outside the wrapper (Django's debug cursor quoting
        # the failed statement's parameters with a query of its own) must not be interrupted
        # too, or its raw error replaces the one that says the search was cancelled.
        deadline[0] = math.inf
        return 1

    raw.set_progress_handler(progress, _SQLITE_PROGRESS_STEPS)
    try:
        with connection.execute_wrapper(wrapper):
            yield
    finally:
        raw.set_progress_handler(None, 0)
