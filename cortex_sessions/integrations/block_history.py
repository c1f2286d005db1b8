"""A session's whole history as one runtime's verbatim records, on PostgreSQL a page per
statement (docs/design.md §19.2, §19.3, §14).

The LangChain history's ``messages`` and Pydantic AI's ``load_history`` read every message of a
session. Through :func:`~cortex_sessions.services.list_messages` most of that time is the
client's: a model instance per row, its whole content decoded, then each record rebuilt from
its block. Here PostgreSQL picks each message's first block of the runtime's type
(:data:`_FIRST_BLOCK`: two lookups, or ``jsonb_path_query_first`` as the OpenAI Agents
adapter's :mod:`.openai_agents_history`), puts the message's text back into a record kept
without it (:mod:`.blocks`: the record block's ``"text_at"``) and aggregates the records into
one JSON array, which the runtime decodes in one call (``json.loads`` + ``messages_from_dict``,
or pydantic's ``validate_json``). The text goes back only at the paths the adapter writes,
each a branch with a constant path (:func:`_record_sql`), by :func:`.blocks.with_text`'s rule;
the statement neither casts nor matches a ``"text_at"`` per row (casting each to a path,
matching it against the adapters' form and walking it twice cost three to four times the
page's plain read, docs/performance.md, "Whole-history reads after the text was stored
once"). A page holding a message whose record is kept as JSON text, that has no such block
(another writer's), or whose ``"text_at"`` is another path, is read again message by message
for the adapter's own conversion (:func:`.blocks.stored_record`: the Python rule decides). The
scope check (and the agent's, for a pinned session) is in each statement.

SQLite and MySQL/MariaDB keep the service path; both paths return the same records
(``tests/runtimes/test_block_history.py``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, TypeVar

from django.db import connections

from .. import routing
from ..models import Message, Session
from ..scope import Scope
from .blocks import Path, _well_formed
from .openai_agents_history import serves

__all__ = ["read_history", "serves"]

T = TypeVar("T")

#: Messages read per statement: a history longer than this is read a page at a time.
PAGE = 5000


def read_history(
    pk: uuid.UUID,
    scope: Scope,
    *,
    block_type: str,
    key: str,
    decode: Callable[[str], list[T]],
    convert: Callable[[str, Any, Any], T | None],
    text_paths: Sequence[Path] = (),
    agent_id: str | None = None,
) -> list[T] | None:
    """Every message of session ``pk`` as a runtime record, in ``seq`` order, or ``None``.

    One statement per page of :data:`PAGE` messages; a page holding a message whose record is
    not kept under ``key`` (kept as JSON text, or no block: another writer's), or is kept
    without its text at a ``"text_at"`` not in ``text_paths``, takes a second statement, which
    reads it message by message for ``convert``.

    Args:
        pk: the session.
        scope: the caller's scope; the session must lie at or beneath it and not have expired
            (docs/design.md §2.3, §18.1).
        block_type: the ``type`` of the content block keeping a record verbatim.
        key: the block's key holding the record as JSON (``key + "_json"``: as JSON text).
        decode: turns a JSON array (text) of records kept under ``key``, each with its
            message's text put back, into the runtime's records, in order (e.g.
            ``ModelMessagesTypeAdapter.validate_json``).
        convert: ``(role, block, content) -> record or None`` for each message of a mixed
            page: ``block`` is its first block of ``block_type``, or ``None``; ``content`` is
            the message's content when it has no such block or the block's record is kept
            without its text (``"text_at"``, :func:`.blocks.stored_record`), else ``None``;
            ``None`` skips the message. It must return what ``decode`` does for a record
            under ``key``.
        text_paths: the ``"text_at"`` paths the adapter writes (each well formed,
            :func:`.blocks.with_text`): the statement puts the text back at these, and only
            these, by the same rule; any other ``"text_at"`` sends its page to ``convert``.
        agent_id: when given, the session must also be this agent's.

    Returns:
        The records, or ``None`` when no such session is visible (missing, out of scope,
        expired, or another agent's): the caller raises the service's error.

    Raises:
        ValueError: a path of ``text_paths`` or ``key`` is not of the adapters' form.
        django.db.Error: as the ORM would; and what ``decode`` and ``convert`` raise.
    """
    canonical = scope.canonical
    connection = connections[routing.db_for_read(Message, scope=scope)]
    quote_name = connection.ops.quote_name
    visible: list[Any] = [pk, canonical, canonical + "0", canonical, canonical + "/"]
    if agent_id is not None:
        visible.append(agent_id)
    jsonpath = f'$[*] ? (@.type == "{block_type}")'
    first = [json.dumps(block_type)] * 2 + [jsonpath]  # _FIRST_BLOCK's parameters
    page_sql = _page_sql(quote_name, agent_id is not None, key, tuple(map(tuple, text_paths)))
    out: list[T] = []
    after = 0
    while True:
        with connection.cursor() as cursor:
            cursor.execute(page_sql, [*first, pk, after, PAGE, *visible])
            row = cursor.fetchone()
        if row is None:
            return None
        count, last_seq, verbatim, mixed = row
        if not mixed:
            out.extend(decode(verbatim))
        else:
            with connection.cursor() as cursor:
                cursor.execute(
                    _entries_sql(quote_name, agent_id is not None),
                    [*first, pk, after, last_seq, *visible],
                )
                entries = cursor.fetchone()
            for role, block, content in json.loads(entries[0]) if entries else ():
                record = convert(role, block, content)
                if record is not None:
                    out.append(record)
        if count < PAGE:
            return out
        after = last_seq


def _visible(agent: bool) -> str:
    """The session ``s`` by id, within the scope (§2.3), not expired (§18.1) [and the
    agent's]: a ``CASE``, as the services' one-statement reads, so the planner does not
    estimate the scope comparisons. Parameters: id, the four scope parameters, [agent id]."""
    return (
        "s.id = %s AND CASE WHEN s.scope >= %s AND s.scope < %s AND (s.scope = %s OR "
        "s.scope >= %s) AND (s.expires_at IS NULL OR s.expires_at > statement_timestamp())"
        + (" AND s.agent_id = %s" if agent else "")
        + " THEN TRUE END"
    )


#: A message's first content block of the runtime's type: the first or the second block (the
#: readable text, then the record: every message an adapter writes) by two lookups, any later
#: one by ``jsonb_path_query_first``, which evaluates its path on every message (about as long
#: again as the rest of a page's statement, docs/performance.md). A block is an object
#: (validation refuses anything else), so each finds the same block. Parameters: the type as
#: JSON text twice, the jsonpath.
_FIRST_BLOCK = (
    "CASE WHEN content -> 0 -> 'type' = %s::jsonb THEN content -> 0"
    " WHEN content -> 1 -> 'type' = %s::jsonb THEN content -> 1"
    " ELSE jsonb_path_query_first(content, %s::jsonpath) END"
)


def _record_sql(key: str, paths: tuple[tuple[str | int, ...], ...]) -> str:
    """A page row's record, ``block``'s value under ``key``, with the message's text (``head``:
    the ``text`` of its first block when that is a text block) put back where the block's
    ``"text_at"`` says, when that is one of ``paths``: the rule of :func:`.blocks.with_text`
    (the text a string; the parent, walked as ``#>`` walks, an object without the last key),
    written out per path with constant paths. ``"text_at"`` is compared as PostgreSQL prints
    it, so a path that is equal as JSON but not of the adapters' form (``0.0`` for ``0``) is
    not one of them. Nothing is cast or matched per row: each branch is a constant path."""
    record = f"(block -> '{key}')"
    branches = []
    for path in paths:
        parent, last = _text_array(path[:-1]), path[-1]
        branches.append(
            f" WHEN '{json.dumps(list(path))}' THEN CASE WHEN jsonb_typeof({record} #> {parent})"
            f" = 'object' AND NOT ({record} #> {parent}) ? '{last}'"
            f" THEN jsonb_set({record}, {_text_array(path)}, head) ELSE {record} END"
        )
    return (
        f"CASE WHEN jsonb_typeof(head) = 'string' THEN CASE (block -> 'text_at')::text"
        f"{''.join(branches)} ELSE {record} END ELSE {record} END"
    )


def _other_path_sql(paths: tuple[tuple[str | int, ...], ...]) -> str:
    """Whether a row's record is kept without its text at a ``"text_at"`` not in ``paths``
    (the text a string): :func:`.blocks.with_text` decides it, message by message."""
    known = ", ".join(f"'{json.dumps(list(path))}'" for path in paths) or "NULL"
    return (
        "(block ? 'text_at' AND jsonb_typeof(head) = 'string' AND"
        f" (block -> 'text_at')::text NOT IN ({known}))"
    )


def _text_array(path: Sequence[str | int]) -> str:
    """``path`` as a ``text[]`` literal (its items are checked: letters, ``_``, digits)."""
    return "'{" + ",".join(str(step) for step in path) + "}'::text[]"


@cache
def _page_sql(
    quote_name: Any, agent: bool, key: str, paths: tuple[tuple[str | int, ...], ...]
) -> str:
    """The page statement of :func:`read_history`, built once per adapter.

    The session is read first (``s``: at most one row), so a session that is not visible
    returns no row and an empty one ``(0, NULL, '[]', NULL)``; the page walks
    ``(session_id, seq)``, the unique index, and takes each message's block and the text of
    its first block (``head``) in its scan, so the messages' content is not carried through
    its sort. ``verbatim``: the records kept under ``key``, the text put back
    (:func:`_record_sql`). ``mixed``: some message of the page has no record under the key, or
    has one kept without its text at another path (a flag, not the messages themselves: an
    aggregate's arguments are computed for every row, whatever its ``FILTER``, and building
    each row's JSON would cost more than the page). ``key`` and ``paths`` are written into the
    statement (checked: letters, ``_`` and digits only). Parameters: :data:`_FIRST_BLOCK`'s,
    id, after, limit, then :func:`_visible`'s.

    Raises:
        ValueError: ``key`` or a path is not of the adapters' form.
    """
    if not _well_formed([key]) or not all(_well_formed(list(path)) for path in paths):
        raise ValueError("block_history: a key or text path not of the adapters' form")
    messages, sessions = quote_name(Message._meta.db_table), quote_name(Session._meta.db_table)
    return (
        "SELECT p.n, p.last_seq, p.verbatim, p.mixed FROM "
        f"{sessions} s CROSS JOIN LATERAL (SELECT count(*) AS n, max(seq) AS last_seq, "
        f"coalesce((json_agg({_record_sql(key, paths)} ORDER BY seq) FILTER (WHERE block ?"
        f" '{key}'))::text, '[]') AS verbatim, bool_or(block IS NULL OR NOT block ? '{key}'"
        f" OR {_other_path_sql(paths)}) AS mixed FROM (SELECT seq, CASE WHEN"
        " content -> 0 ->> 'type' = 'text' THEN content -> 0 -> 'text' END AS head,"
        f" {_FIRST_BLOCK} AS block "
        f"FROM {messages} m WHERE m.session_id = %s AND m.seq > %s ORDER BY m.seq LIMIT %s)"
        f" AS page) AS p WHERE {_visible(agent)}"
    )


@cache
def _entries_sql(quote_name: Any, agent: bool) -> str:
    """The statement reading a mixed page message by message, built once: one JSON array of
    ``[role, block, content when there is no block or the block's record lacks its text]``
    in ``seq`` order. Parameters: the :data:`_FIRST_BLOCK`'s, id, after, the page's last
    seq, then :func:`_visible`'s."""
    messages, sessions = quote_name(Message._meta.db_table), quote_name(Session._meta.db_table)
    return (
        "SELECT coalesce(json_agg(json_build_array(role, block, CASE WHEN block IS NULL OR"
        " block ? 'text_at' THEN content END) ORDER BY seq)::text, '[]') FROM "
        f"{sessions} s CROSS JOIN LATERAL (SELECT seq, role, content, "
        f"{_FIRST_BLOCK} AS block "
        f"FROM {messages} m WHERE m.session_id = %s AND m.seq > %s AND m.seq <= %s) AS page"
        f" WHERE {_visible(agent)} GROUP BY s.id"
    )
