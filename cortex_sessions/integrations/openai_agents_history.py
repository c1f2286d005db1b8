"""The whole history of a :class:`~.openai_agents.CortexSession` on PostgreSQL, a page per
statement (docs/design.md §13.2, §14).

``get_items()`` without a limit reads every message of the session. Row by row, most of its time
is the client's: a tuple and a JSON decode per row, and the content's text block decoded only to
be dropped. Here PostgreSQL picks each message's item block (``jsonb_path_query_first``) and
aggregates a page into one JSON array, which the client decodes in one call: of the items alone
(:func:`items_page`), or, when a message of the page has no ``item`` (no item block: its content
comes for the text fallback of the module docs of :mod:`.openai_agents`; or ``item_json``), of
each message's role, block and content (:func:`history_page`, a second statement). SQLite and MySQL/MariaDB keep the ORM path; both paths return the same
items (``tests/runtimes/test_openai_agents_history.py``).
"""

from __future__ import annotations

import json
import uuid
from functools import cache
from typing import Any

from django.db import connections

from .. import routing
from ..models import Message, Session
from ..scope import Scope

__all__ = ["history_page", "items_page", "newest_page", "serves"]


def serves(scope: Scope) -> bool:
    """Whether :func:`history_page` serves reads of ``scope``: the database the router sends
    them to is PostgreSQL."""
    return bool(connections[routing.db_for_read(Message, scope=scope)].vendor == "postgresql")


def history_page(
    pk: uuid.UUID, scope: Scope, *, after: int, size: int, block_type: str
) -> tuple[int, int, list[tuple[str, Any, Any]], bool]:
    """The oldest ``size`` messages of session ``pk`` with ``seq > after``, in ``seq`` order, in
    one statement, scope-checked in it (the §2.3 predicate, as the newest-page statement).

    Args:
        pk: the session.
        scope: the caller's scope; messages outside it are never read.
        after: the ``seq`` the page starts after (``0``: the first page).
        size: most messages in the page, ``>= 1``.
        block_type: the ``type`` of the content block holding a message's item.

    Returns:
        ``(count, last_seq, entries, compacted)``: how many messages the page holds, the
        ``seq`` of its last (``0`` when empty), per message ``(role, block, content)``: its
        first block of ``block_type`` (or ``None``), and its content when it has no such block
        (else ``None``); and whether the session holds a compaction summary (§16.3), whose
        history is then the context's instead.
    """
    connection = connections[routing.db_for_read(Message, scope=scope)]
    params = _page_params(pk, scope, after=after, size=size, block_type=block_type)
    with connection.cursor() as cursor:
        cursor.execute(_page_sql(connection.ops.quote_name), params)
        count, last_seq, text, compacted = cursor.fetchone()
    entries = json.loads(text) if isinstance(text, str | bytes) else text
    page = [(role, block, content) for role, block, content in entries]
    return count, last_seq or 0, page, bool(compacted)


def items_page(
    pk: uuid.UUID, scope: Scope, *, after: int, size: int, block_type: str
) -> tuple[int, int, list[Any] | None, bool]:
    """The items of the oldest ``size`` messages of session ``pk`` with ``seq > after``, in
    ``seq`` order, in one statement scope-checked as :func:`history_page`: PostgreSQL
    aggregates each message's ``item`` alone (the block's type tag and the message's role and
    content are not written out and decoded; ~a quarter of the page statement's time), with a
    flag that some message of the page has no ``item`` (no item block, or ``item_json``).

    Args:
        pk, scope, after, size, block_type: as :func:`history_page`.

    Returns:
        ``(count, last_seq, items, compacted)``: as :func:`history_page`, with ``items`` the
        page's items in ``seq`` order; ``None`` when some message of the page has no ``item``
        in its block: the caller reads the same page with :func:`history_page`, which brings
        each message's block and content for its own conversion.
    """
    connection = connections[routing.db_for_read(Message, scope=scope)]
    params = _page_params(pk, scope, after=after, size=size, block_type=block_type)
    with connection.cursor() as cursor:
        cursor.execute(_items_sql(connection.ops.quote_name), params)
        count, last_seq, text, compacted, mixed = cursor.fetchone()
    items = None if mixed else json.loads(text) if isinstance(text, str | bytes) else text
    return count, last_seq or 0, items, bool(compacted)


def newest_page(
    pk: uuid.UUID, scope: Scope, *, before: int | None, size: int, block_type: str
) -> tuple[int, int, list[tuple[str, Any, Any]], bool]:
    """The newest ``size`` messages of session ``pk`` (with ``seq < before`` when given),
    newest first, in one statement that also tells whether the session is compacted (the
    newest-``limit`` read of ``get_items``; docs/design.md §13.2, §16.5), scope-checked in it as
    :func:`history_page`.

    Args:
        pk: the session.
        scope: the caller's scope; messages outside it are never read.
        before: the ``seq`` the page ends before (``None``: the newest page).
        size: most messages in the page, ``>= 1``.
        block_type: the ``type`` of the content block holding a message's item.

    Returns:
        ``(count, first_seq, entries, compacted)``: as :func:`history_page`, but ``first_seq``
        is the ``seq`` of the page's oldest message (``0`` when empty) and ``entries`` run
        newest first.
    """
    connection = connections[routing.db_for_read(Message, scope=scope)]
    params = _scoped_params(pk, scope, block_type)
    if before is not None:
        params.append(before)
    params.append(size)
    with connection.cursor() as cursor:
        cursor.execute(_newest_sql(connection.ops.quote_name, before is not None), params)
        count, first_seq, text, compacted = cursor.fetchone()
    entries = json.loads(text) if isinstance(text, str | bytes) else text
    page = [(role, block, content) for role, block, content in entries]
    return count, first_seq or 0, page, bool(compacted)


@cache
def _page_sql(quote_name: Any) -> str:
    """The statement of :func:`history_page`, built once."""
    return _sql(quote_name, newest=False, before=False)


@cache
def _items_sql(quote_name: Any) -> str:
    """The statement of :func:`items_page`, built once: :func:`_page_sql`'s page with its
    aggregate of the items alone and the ``mixed`` flag."""
    return _sql(quote_name, newest=False, before=False, items=True)


@cache
def _newest_sql(quote_name: Any, before: bool) -> str:
    """The statement of :func:`newest_page`, built once per shape."""
    return _sql(quote_name, newest=True, before=before)


def _sql(quote_name: Any, *, newest: bool, before: bool, items: bool = False) -> str:
    """A page statement: the oldest page after a ``seq`` (``newest=False``) or the newest
    (before one, with ``before``); with ``items``, each message's ``item`` alone and a last
    column telling that some message has none (:func:`items_page`)."""
    if newest:
        bound = "AND seq < %s " if before else ""
        order, edge = "seq DESC", "min"
    else:
        bound, order, edge = "AND seq > %s ", "seq", "max"
    if items:  # the item alone (a block holds an object, validation refuses anything else)
        entry, mixed = "block -> 'item'", ", bool_or(block IS NULL OR NOT block ? 'item')"
    else:
        entry, mixed = "json_build_array(role, block, CASE WHEN block IS NULL THEN content END)", ""
    return (
        f"SELECT count(*), {edge}(seq), coalesce(json_agg({entry} ORDER BY {order})::text, '[]'), "
        # whether the session holds a compaction summary (§16.3), on the checkpoint index
        f"EXISTS (SELECT 1 FROM {quote_name(Message._meta.db_table)} x WHERE x.session_id = %s"
        " AND x.role = 'user' AND x.source = 'checkpoint' AND x.compacts_through_seq IS NOT NULL)"
        f"{mixed} FROM ("
        "SELECT seq, role, content, jsonb_path_query_first(content, %s::jsonpath) AS block "
        f"FROM {quote_name(Message._meta.db_table)} "
        "WHERE session_id = %s AND scope >= %s AND scope < %s AND (scope = %s OR scope >= %s) "
        # an expired session's messages are hidden until the sweep deletes them (§18.1)
        f"AND NOT EXISTS (SELECT 1 FROM {quote_name(Session._meta.db_table)} s WHERE"
        " s.id = session_id AND s.expires_at <= statement_timestamp()) "
        f"{bound}ORDER BY {order} LIMIT %s) AS page"
    )


def _page_params(
    pk: uuid.UUID, scope: Scope, *, after: int, size: int, block_type: str
) -> list[Any]:
    """The parameters of :func:`history_page`'s and :func:`items_page`'s statements: the
    session, the block path, the session again, the four scope bounds, ``after`` and ``size``."""
    return [*_scoped_params(pk, scope, block_type), after, size]


def _scoped_params(pk: uuid.UUID, scope: Scope, block_type: str) -> list[Any]:
    """The parameters every page statement here starts with: the session, the block path, the
    session again and the four scope bounds."""
    canonical = scope.canonical
    return [
        pk,
        f'$[*] ? (@.type == "{block_type}")',
        pk,
        canonical,
        canonical + "0",
        canonical,
        canonical + "/",
    ]
