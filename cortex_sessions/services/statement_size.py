"""How an append's messages fit the statements that store them (docs/design.md §12.6, §15).

An append is one transaction, but not always one statement's worth of bytes: within
``MAX_MESSAGES_PER_APPEND`` messages of ``MAX_MESSAGE_BYTES`` each it may carry up to a gigabyte
of JSON (1,000 × 1 MiB by default), where

- on PostgreSQL the append function (``_pg.APPEND_MANY``) reads its messages as one ``jsonb``
  array, which holds at most 268,435,455 bytes: a larger append takes the ORM path
  (:func:`fits_one_call`);
- on MySQL/MariaDB the server refuses a statement over its ``max_allowed_packet`` (16 MiB by
  default on MariaDB 10.2+ and MySQL 8.0.3+), or drops the connection: the ORM path inserts the
  rows in as many statements as the packet needs, in the same transaction
  (:func:`insert_batches`), and refuses, before writing, a message that no statement of the
  server's could carry.

What is stored is the same whatever the statements: the rows, their ``seq`` and the session's
counters are written in one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connections

from ..content import utf8_size
from ..exceptions import MessageTooLarge

__all__ = [
    "ONE_CALL_BYTES",
    "check_text_fits",
    "fits_one_call",
    "insert_batches",
    "statement_bytes",
]

#: The most bytes of message JSON one call of PostgreSQL's append function takes: half of
#: what its ``jsonb`` array may hold (268,435,455 bytes), the array's own framing and the
#: ``jsonb`` form of the values (a number or an escape may take more bytes than its text)
#: well inside the rest.
ONE_CALL_BYTES = 128 << 20
#: Bytes of a row besides its JSON values in an ``INSERT`` (the other columns' values, the
#: separators), counted generously.
ROW_BYTES = 1024
#: On MySQL/MariaDB, the statement bytes under which no server's ``max_allowed_packet`` is
#: worth reading (1 MiB; the smallest default, MySQL 5.7's, is 4 MiB).
SMALL_STATEMENT = 1 << 20
#: The most statement bytes one ``INSERT`` carries on PostgreSQL and SQLite (both take
#: statements of up to a gigabyte; a quarter of that keeps the client's copy of the text
#: bounded).
OTHER_DATABASES = 256 << 20


def fits_one_call(built: Sequence[Any]) -> bool:
    """Whether the messages ``built`` (``message_input`` validated them: each has
    ``content_json``, ``metadata_json`` and ``usage_json``) fit one call of PostgreSQL's append
    function: at most :data:`ONE_CALL_BYTES` of JSON, UTF-8 encoded. Counts characters first
    (a character is at most four bytes), and bytes only when the characters cannot tell.
    """
    texts = [text for message in built for text in _texts(message)]
    characters = sum(map(len, texts))
    if characters * 4 <= ONE_CALL_BYTES:
        return True
    if characters > ONE_CALL_BYTES:
        return False
    return sum(map(utf8_size, texts)) <= ONE_CALL_BYTES


def statement_bytes(message: Any) -> int:
    """An upper bound of the bytes ``message`` (validated) takes in the text of an ``INSERT``
    whose values the driver quotes into it, as mysqlclient does for Django's MySQL backend:
    each JSON value as Django encodes it (non-ASCII characters as ``\\uXXXX`` escapes), then
    every quote, backslash and NUL doubled by the driver's escaping, plus :data:`ROW_BYTES`
    (twice the JSON text, a non-ASCII character counted as its Python escape; elsewhere, where
    values are bound apart or quoted without escapes, an ample bound)."""
    return ROW_BYTES + sum(map(_quoted_bytes, _texts(message)))


def insert_batches(alias: str, built: Sequence[Any]) -> list[slice]:
    """The messages ``built`` (validated, in order) cut into runs that one ``INSERT`` each may
    carry on database ``alias``, as slices of ``built``: all of them in one run unless their
    :func:`statement_bytes` together pass the database's limit (on MySQL/MariaDB its
    ``max_allowed_packet``, read from the server only for an append of more than
    :data:`SMALL_STATEMENT` bytes; elsewhere :data:`OTHER_DATABASES`).

    Raises:
        MessageTooLarge: one message alone is over the limit (with ``MAX_MESSAGE_BYTES``
            raised past half a MySQL/MariaDB server's ``max_allowed_packet``, or elsewhere past
            an eighth of a gigabyte); nothing was written.
        django.db.Error: reading the setting failed.
    """
    sizes = [statement_bytes(message) for message in built]
    total = sum(sizes)
    limit = _limit(alias, total)
    if total <= limit:
        return [slice(0, len(built))]
    runs: list[slice] = []
    start, carried = 0, 0
    for index, size in enumerate(sizes):
        if size > limit:
            raise MessageTooLarge(
                f"The message at index {index} takes up to {size} bytes in the statement that"
                f" stores it; the database takes statements of at most {limit} bytes"
                " (on MySQL/MariaDB: max_allowed_packet).",
                field="content",
                size=size,
                limit=limit,
            )
        if carried + size > limit:
            runs.append(slice(start, index))
            start, carried = index, 0
        carried += size
    runs.append(slice(start, len(sizes)))
    return runs


def check_text_fits(alias: str, text: str, *, what: str) -> None:
    """Refuse ``text``, about to be stored in one statement on database ``alias`` (an
    idempotency key's recorded response, which holds every message of the append it
    answers), when no statement of the database carries it: on MySQL/MariaDB past the
    server's ``max_allowed_packet`` (:func:`insert_batches`' limit). PostgreSQL and SQLite
    take a value of up to a gigabyte, more than any append's response (nothing is checked).

    Args:
        what: what ``text`` is, for the error's message.

    Raises:
        MessageTooLarge: as said (413 ``message_too_large`` from the API); the caller's
            transaction rolls back, so nothing is written.
        django.db.Error: reading the server's setting failed.
    """
    if connections[alias].vendor != "mysql":
        return
    size = ROW_BYTES + _quoted_bytes(text)
    limit = _limit(alias, size)
    if size > limit:
        raise MessageTooLarge(
            f"{what} takes up to {size} bytes in the statement that stores it; the database"
            f" takes statements of at most {limit} bytes (on MySQL/MariaDB:"
            " max_allowed_packet).",
            field="messages",
            size=size,
            limit=limit,
        )


def _limit(alias: str, total: int) -> int:
    """The most statement bytes one ``INSERT`` may carry on ``alias``; ``total``: the
    append's, which tells whether a MySQL/MariaDB server's setting is worth reading."""
    connection = connections[alias]
    if connection.vendor != "mysql":
        return OTHER_DATABASES
    if total <= SMALL_STATEMENT:
        return SMALL_STATEMENT
    with connection.cursor() as cursor:
        cursor.execute("SELECT @@max_allowed_packet")
        (packet,) = cursor.fetchone()
    return int(packet) - 64 * ROW_BYTES  # the statement's own text around the rows


def _quoted_bytes(text: str) -> int:
    """An upper bound of the bytes JSON ``text`` takes quoted into a MySQL statement (see
    :func:`statement_bytes`): twice its length, a non-ASCII character counted as its Python
    escape, at least as long as JSON's."""
    if not text.isascii():
        text = text.encode("ascii", "backslashreplace").decode("ascii")
    return 2 * len(text)


def _texts(message: Any) -> list[str]:
    return [
        text for text in (message.content_json, message.metadata_json, message.usage_json) if text
    ]
