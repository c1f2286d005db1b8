"""A session's whole history as one runtime's verbatim records, on PostgreSQL a page per
statement (docs/design.md §19.2, §19.3, §14).

The LangChain history's ``messages`` and Pydantic AI's ``load_history`` read every message of a
session. Through :func:`~cortex_sessions.services.list_messages` most of that time is the
client's: a model instance per row, its whole content decoded (the text block only to be
dropped), then each record rebuilt from its block. Here PostgreSQL picks each message's first
block of the runtime's type (:data:`_FIRST_BLOCK`: two lookups, or ``jsonb_path_query_first``
as the OpenAI Agents adapter's :mod:`.openai_agents_history`) and aggregates the records it
keeps verbatim into one text, a line per record, each beside its block's ``"text_at"`` and its
message's text where it has one. The client cuts the lines, then parses a hundred records at a
time (:data:`CHUNK`: the page's parsed JSON is never alive at once, which cost the garbage
collector a third of the read), puts each message's text back into a record kept without it
(:func:`.blocks.with_texts`, by the rule the Python read applies, so both paths agree by
construction) and builds the runtime's records in one call per hundred
(``messages_from_dict``, or pydantic's ``validate_python``). Where the runtime decodes JSON
text, records of its usual shape skip the parse: the text goes back into their JSON text and
they are decoded from it at once (:class:`Splice`: Pydantic AI's ``validate_json``, as its
plain-SQL floor decodes, docs/performance.md "Whole-history reads: a page as lines"). The
statement itself does not put the text back: ``jsonb_set`` rebuilds each record, and
casting, matching and walking each ``"text_at"`` cost as much again, three to four times the
page's plain read; with constant paths, one branch per path an adapter writes, it still cost
what the client's put-back does (docs/performance.md, "Whole-history reads after the text was
stored once"). A page holding
a message whose record is kept as JSON text, or that has no such block (another writer's), is
read again message by message for the adapter's own conversion, and so is a page holding a
block no adapter wrote, whose record the runtime cannot read (its message then reads as
another writer's). The scope check (and the agent's, for a pinned session) is in each
statement.

SQLite and MySQL/MariaDB keep the service path; both paths return the same records
(``tests/runtimes/test_block_history.py``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, cached_property
from typing import Any, TypeVar

from django.db import connections

from .. import routing
from ..models import Message, Session
from ..scope import Scope
from .blocks import BAD_RECORD, with_texts
from .openai_agents_history import serves

__all__ = ["Splice", "read_history", "serves"]

T = TypeVar("T")

#: Messages read per statement: a history longer than this is read a page at a time.
PAGE = 5000


def read_history(
    pk: uuid.UUID,
    scope: Scope,
    *,
    block_type: str,
    key: str,
    decode: Callable[[list[Any]], list[T]],
    convert: Callable[[str, Any, Any], T | None],
    agent_id: str | None = None,
    parse: Callable[[str], Any] = json.loads,
    splice: Splice | None = None,
) -> list[T] | None:
    """Every message of session ``pk`` as a runtime record, in ``seq`` order, or ``None``.

    One statement per page of :data:`PAGE` messages; a page holding a message whose record is
    not kept under ``key`` (kept as JSON text, or no block: another writer's) takes a second
    statement, which reads it message by message for ``convert``. A page where ``decode`` (or
    ``convert`` of a block alone) raises :data:`.blocks.BAD_RECORD` (a block no adapter wrote,
    ``{"type": block_type, key: null}`` posted through the API) is read again message by
    message, every one with its content, which ``convert`` reads as another writer's: such a
    block never makes the history unreadable, and reads as the services' path reads it.

    Args:
        pk: the session.
        scope: the caller's scope; the session must lie at or beneath it and not have expired
            (docs/design.md §2.3, §18.1).
        block_type: the ``type`` of the content block keeping a record verbatim.
        key: the block's key holding the record as JSON (``key + "_json"``: as JSON text).
        decode: turns a list of records kept under ``key`` (parsed JSON, each with its
            message's text put back) into the runtime's records, in order (e.g.
            ``ModelMessagesTypeAdapter.validate_python``); raises a
            :data:`.blocks.BAD_RECORD` error for a record it cannot read.
        convert: ``(role, block, content) -> record or None`` for each message read message
            by message: ``block`` is its first block of ``block_type``, or ``None``;
            ``content`` is the message's content when it has no such block, the block's
            record is kept without its text (``"text_at"``, :func:`.blocks.stored_record`) or
            the page is read again whole, else ``None``; ``None`` skips the message. It must
            return what ``decode`` does for a record under ``key``; given ``content`` it must
            not raise for a bad record (it reads the message as another writer's); given
            ``None``, it raises a :data:`.blocks.BAD_RECORD` error for one.
        agent_id: when given, the session must also be this agent's.
        parse: turns JSON text of a list (a hundred records, beside their texts) into a list
            (default ``json.loads``; e.g. ``pydantic_core.from_json``).
        splice: where the runtime decodes JSON text, how the text goes back into the JSON
            text of the records of its common shape (:class:`Splice`), or ``None``.

    Returns:
        The records, or ``None`` when no such session is visible (missing, out of scope,
        expired, or another agent's): the caller raises the service's error.

    Raises:
        django.db.Error: as the ORM would; and what ``parse`` raises, and ``decode`` and
            ``convert`` but :data:`.blocks.BAD_RECORD` (read again as described above).
    """
    canonical = scope.canonical
    connection = connections[routing.db_for_read(Message, scope=scope)]
    quote_name = connection.ops.quote_name
    visible: list[Any] = [pk, canonical, canonical + "0", canonical, canonical + "/"]
    if agent_id is not None:
        visible.append(agent_id)
    jsonpath = f'$[*] ? (@.type == "{block_type}")'
    first = [json.dumps(block_type)] * 2 + [jsonpath]  # _FIRST_BLOCK's parameters
    agent = agent_id is not None
    out: list[T] = []
    after = 0
    while True:
        where: list[Any] = [*first, pk, after]  # _FIRST_BLOCK's, the session, the page's start
        with connection.cursor() as cursor:
            cursor.execute(
                _page_sql(quote_name, agent),
                [key, key, key, *where, PAGE, *visible],
            )
            row = cursor.fetchone()
        if row is None:
            return None
        count, last_seq, lines, mixed = row
        page: list[T] | None
        if not mixed:
            page = _decoded(lines, parse, decode, splice)  # None: a block no adapter wrote
        else:  # the content only of the messages whose block does not suffice
            page = _one_by_one(connection, agent, convert, [*where, last_seq, *visible], False)
        if page is None:  # a record does not decode: every message with its content
            page = _one_by_one(connection, agent, convert, [*where, last_seq, *visible], True) or []
        out.extend(page)
        if count < PAGE:
            return out
        after = last_seq


#: Records parsed and decoded at a time: each group's parsed JSON is dropped before the next
#: is parsed, so the garbage collector sees a hundred records' worth, not a page's (parsing
#: a whole page first made the read a third slower: docs/performance.md).
CHUNK = 100


@dataclass(frozen=True)
class Splice:
    """How the text goes back into the JSON text of the records of one common shape, so
    they are decoded from JSON text (pydantic's ``validate_json``, no Python tree of the
    records first: the floor's own decode, docs/performance.md) where the rest are parsed,
    given their text (:func:`.blocks.with_texts`) and decoded (docs/design.md §19.3).

    A record whose block's ``"text_at"`` prints (``jsonb::text``) as :attr:`path` and whose
    text is a JSON string, and whose JSON text starts with one of :attr:`prefixes` followed
    by anything but ``}``, gets ``"key": text,`` (``key`` the path's last) right after the
    prefix. Each prefix must end with the ``{`` opening the object the path leads to (keys
    and scalar values only before it), so the text lands where :func:`.blocks.with_text`
    puts it; where that object already holds the key, ``decode_json`` must keep the later
    value (pydantic's parser does), the record's own, as :func:`.blocks.with_text` keeps it.
    A record without ``"text_at"`` goes as it is; any other goes the parse's way.

    Attributes:
        path: a ``"text_at"`` the adapter writes, as PostgreSQL prints it
            (``'["parts", 0, "content"]'``).
        prefixes: the starts of the records' JSON text (PostgreSQL's: ``", "`` and ``": "``
            between items) that open that object.
        decode_json: JSON text of a list of records to the runtime's records, raising a
            :data:`.blocks.BAD_RECORD` error where ``decode`` would.
    """

    path: str
    prefixes: tuple[str, ...]
    decode_json: Callable[[str], list[Any]]

    @cached_property
    def key_prefix(self) -> str:
        """``"key": `` for the path's last key, as JSON."""
        return json.dumps(json.loads(self.path)[-1]) + ": "

    def record(self, line: str) -> str | None:
        """The JSON text of the record of a page's ``line`` with its text in place, or
        ``None`` when it is not of this shape."""
        path, text, record = line.split("\t")
        if path == "null":
            return record  # no text to put back
        if path != self.path or text[:1] != '"':
            return None
        for prefix in self.prefixes:
            if record.startswith(prefix) and record[len(prefix) : len(prefix) + 1] != "}":
                return prefix + self.key_prefix + text + ", " + record[len(prefix) :]
        return None


def _decoded(
    lines: str | None,
    parse: Callable[[str], Any],
    decode: Callable[[list[Any]], list[T]],
    splice: Splice | None,
) -> list[T] | None:
    """The records of a page's ``lines`` (:func:`_page_sql`), in order: each run of records
    of the ``splice``'s shape decoded from JSON text at once, the others :data:`CHUNK` at a
    time (:func:`_parsed`); ``None`` when a decode raises :data:`.blocks.BAD_RECORD` (a block
    no adapter wrote)."""
    if not lines:
        return []
    rows = lines.split("\n")
    if splice is None:
        return _parsed(rows, parse, decode)
    out: list[T] = []
    spliced: list[str] = []
    parsed: list[str] = []
    try:
        for line in rows:
            record = splice.record(line)
            if record is None:
                if spliced:
                    out.extend(splice.decode_json("[" + ",".join(spliced) + "]"))
                    spliced = []
                parsed.append(line)
                continue
            if parsed:
                done = _parsed(parsed, parse, decode)
                if done is None:
                    return None
                out.extend(done)
                parsed = []
            spliced.append(record)
        if spliced:
            out.extend(splice.decode_json("[" + ",".join(spliced) + "]"))
    except BAD_RECORD:
        return None
    done = _parsed(parsed, parse, decode) if parsed else []
    return None if done is None else out + done


def _parsed(
    rows: list[str], parse: Callable[[str], Any], decode: Callable[[list[Any]], list[T]]
) -> list[T] | None:
    """The records of a page's lines ``rows``, :data:`CHUNK` at a time: parsed, given their
    text (:func:`.blocks.with_texts`) and decoded; ``None`` when ``decode`` raises
    :data:`.blocks.BAD_RECORD`."""
    paths: dict[str, Any] = {}
    out: list[T] = []
    for start in range(0, len(rows), CHUNK):
        cut = [row.split("\t", 1) for row in rows[start : start + CHUNK]]
        values = parse("[" + ",".join(rest for _, rest in cut).replace("\t", ",") + "]")
        records = values[1::2]
        texts = values[0::2]
        with_texts(records, [path for path, _ in cut], texts, seen=paths)  # parsed: in place
        try:
            out.extend(decode(records))
        except BAD_RECORD:
            return None
    return out


def _one_by_one(
    connection: Any,
    agent: bool,
    convert: Callable[[str, Any, Any], T | None],
    params: list[Any],
    whole: bool,
) -> list[T] | None:
    """A page's messages read one by one (:func:`_entries_sql`, parameters ``params`` but the
    first), each through ``convert``; ``None`` when, not ``whole``, ``convert`` raised
    :data:`.blocks.BAD_RECORD` for a message given without its content (a block no adapter
    wrote): the caller reads the page again, ``whole``, every message with its content, which
    ``convert`` then reads as another writer's message (docs/design.md §19.2, §19.3).

    Raises:
        django.db.Error: as the ORM would; and what ``convert`` raises (but, not ``whole``,
            :data:`.blocks.BAD_RECORD`).
    """
    with connection.cursor() as cursor:
        cursor.execute(_entries_sql(connection.ops.quote_name, agent), [whole, *params])
        entries = cursor.fetchone()
    out: list[T] = []
    for role, block, content in json.loads(entries[0]) if entries else ():
        try:
            record = convert(role, block, content)
        except BAD_RECORD:
            if whole:
                raise
            return None
        if record is not None:
            out.append(record)
    return out


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


@cache
def _page_sql(quote_name: Any, agent: bool) -> str:
    """The page statement of :func:`read_history`, built once.

    The session is read first (``s``: at most one row), so a session that is not visible
    returns no row and an empty one ``(0, NULL, NULL, NULL)``; the page walks
    ``(session_id, seq)``, the unique index. ``lines``: for each message whose block keeps
    its record under the key, in ``seq`` order, one line (joined by ``\\n``) of three JSON
    values joined by tabs: its block's ``"text_at"`` (or ``null``), the text of the message's
    first block when that is a text block (any JSON value, or ``null``; taken in the page's
    scan, so the messages' content is not carried through its sort), and the record as
    stored (without the text of one kept without it), for :func:`.blocks.with_texts` (which
    reads each distinct path's text once: ``0.0`` prints apart from ``0``) or a
    :class:`Splice`. PostgreSQL prints ``jsonb`` with every control character escaped, so no
    value holds a newline or a tab: the client cuts the page into lines and each line into
    its values, and parses and decodes a few lines at a time. ``mixed``: some message of the page
    has no record under the key (a flag, not the messages themselves: an aggregate's
    arguments are computed for every row, whatever its ``FILTER``, and building each row's
    JSON would cost more than the page). One aggregate, so PostgreSQL 15 sorts the page's
    rows for it once (it sorts an ordered aggregate's input even when the page comes in
    ``seq`` order). Parameters: key three times, :data:`_FIRST_BLOCK`'s, id, after, limit,
    then :func:`_visible`'s.
    """
    messages, sessions = quote_name(Message._meta.db_table), quote_name(Session._meta.db_table)
    return (
        "SELECT p.n, p.last_seq, p.lines, p.mixed FROM "
        f"{sessions} s CROSS JOIN LATERAL (SELECT count(*) AS n, max(seq) AS last_seq, "
        "string_agg(CASE WHEN block ? 'text_at' THEN (block -> 'text_at')::text"
        " || E'\\t' || coalesce(head::text, 'null') ELSE E'null\\tnull' END || E'\\t' ||"
        " (block -> %s)::text, E'\\n' ORDER BY seq) FILTER (WHERE block ? %s) AS lines,"
        " bool_or(block IS NULL OR NOT block ? %s) AS mixed FROM (SELECT seq, CASE WHEN"
        " content -> 0 ->> 'type' = 'text' THEN content -> 0 -> 'text' END AS head,"
        f" {_FIRST_BLOCK} AS block "
        f"FROM {messages} m WHERE m.session_id = %s AND m.seq > %s ORDER BY m.seq LIMIT %s)"
        f" AS page) AS p WHERE {_visible(agent)}"
    )


@cache
def _entries_sql(quote_name: Any, agent: bool) -> str:
    """The statement reading a page message by message, built once: one JSON array of
    ``[role, block, content when asked for every message (whole), or there is no block, or the
    block's record lacks its text]`` in ``seq`` order. Parameters: whole (a boolean), the
    :data:`_FIRST_BLOCK`'s, id, after, the page's last seq, then :func:`_visible`'s."""
    messages, sessions = quote_name(Message._meta.db_table), quote_name(Session._meta.db_table)
    return (
        "SELECT coalesce(json_agg(json_build_array(role, block, CASE WHEN %s OR block IS NULL"
        " OR block ? 'text_at' THEN content END) ORDER BY seq)::text, '[]') FROM "
        f"{sessions} s CROSS JOIN LATERAL (SELECT seq, role, content, "
        f"{_FIRST_BLOCK} AS block "
        f"FROM {messages} m WHERE m.session_id = %s AND m.seq > %s AND m.seq <= %s) AS page"
        f" WHERE {_visible(agent)} GROUP BY s.id"
    )
