"""Hand-written SQL for the hot paths on PostgreSQL: one round trip per call (docs/design.md §14).

The three calls an agent runtime makes on every turn — append, read the newest messages, and
get/resolve the session — are each one statement here. Everything else (and every other
database) goes through the ORM. The service functions in ``messages.py`` and ``sessions.py``
validate their arguments exactly as before, then call :func:`enabled` and, on PostgreSQL, the
functions of this module instead of building querysets. The rules live in the service
functions; this module only sends SQL and turns rows into the same model instances the ORM
would have built (``Model.from_db`` with each field's ``from_db_value``; see :func:`_instances`
for how they are built faster with the same result).

Why hand-written SQL: on a sub-millisecond statement, Django's fixed cost (building and
compiling a queryset, client-side binding) is 2-3 times the database's own time, and the ORM
has no way to say "update this row and insert rows numbered from its new ``last_seq``" in one
statement; the ORM path needs three (lock, insert, update). See docs/performance.md.

Statements go through a Django cursor wrapper whenever something would see it, so
``CaptureQueriesContext``, ``connection.execute_wrapper`` hooks and ``django.db.backends``
logging see them as any ORM query; Django's database error classes are raised either way.
When nothing watches, the append, get and resolve skip the cursor too (:func:`_send`). They
are sent with server-side binding (psycopg 3)
as unnamed statements, which any pooler passes through; with
``CORTEX_SESSIONS["PREPARED_STATEMENTS"]`` (default off) they are prepared once per connection
instead (``prepare=True``); see :func:`_cursor` and docs/performance.md for the PgBouncer
caveat. The append of one message is a call of the PL/pgSQL function :data:`APPEND_ONE`
(created by ``0012_squashed_0018_search_and_functions`` on a new database, by
``0016_append_one_returns_an_array`` on one migrated before the squash; ``0018`` drops the
pre-release versions), whose statement the
server plans once per session and keeps: see :func:`_sql_call`. Get and resolve are calls of
the functions :data:`GET` and :data:`RESOLVE` (the same squash, or
``0017_get_and_resolve_functions``).

The scope predicate is the one :func:`cortex_sessions.scope.scope_q` builds: an index range on
the canonical string (the column has ``COLLATE "C"``) plus a filter that keeps exactly the
scope and what lies beneath it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from contextlib import suppress
from datetime import datetime
from functools import cache
from typing import Any, NamedTuple, cast

from django.db import DataError, connections
from django.db.models import (
    BooleanField,
    CharField,
    DateTimeField,
    GeneratedField,
    IntegerField,
    JSONField,
    Model,
    TextField,
    UUIDField,
)
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

from ..conf import app_settings
from ..fields import ScopeField
from ..models import Message, Session

__all__ = [
    "APPEND_ONE",
    "GET",
    "RESOLVE",
    "append_rows",
    "create_functions",
    "enabled",
    "function_sql",
    "get_session",
    "newest_messages",
    "resolve_default",
    "serves",
]


@cache
def enabled(alias: str) -> bool:
    """Whether the hot-path SQL serves database ``alias``: PostgreSQL through psycopg 3, whose
    server-side binding, loaders and connection state the hot paths use. Under psycopg 2
    (which Django uses only when psycopg 3 is not installed) the ORM path serves it, as on
    every other database. An alias's backend never changes while the process runs, so the
    answer is kept."""
    if connections[alias].vendor != "postgresql":
        return False
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return bool(is_psycopg3)


def serves(alias: str) -> bool:
    """Whether the hot-path SQL serves this call on database ``alias``: :func:`enabled`, and the
    server session is as Django sets it up (``client_encoding`` ``UTF8``, ``DateStyle`` ISO),
    which the statements' JSON text and the ``text[]`` rows they return rely on. A host that
    changes either on a connection (``SET client_encoding TO 'SJIS'``: a ``\\`` byte inside a
    character, ``SQL_ASCII``: text as bytes; a non-ISO ``DateStyle``) gets the ORM path for
    as long as it lasts, which reads and writes through Django's own adapters. Opens the
    connection if it is not open yet (the call needs it either way).

    Raises:
        django.db.Error: the connection cannot be opened, or was closed behind Django's back.
    """
    if not enabled(alias):
        return False
    connection = connections[alias]
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    with connection.wrap_database_errors:
        status = connection.connection.pgconn.parameter_status
        encoding, style = status(b"client_encoding"), status(b"DateStyle")
    return encoding == b"UTF8" and style is not None and style.startswith(b"ISO")


# -- statements -----------------------------------------------------------------------------------


def _columns(model: type[Model], prefix: str = "") -> str:
    return ", ".join(f'{prefix}"{field.column}"' for field in model._meta.concrete_fields)


#: The canonical-string range of ``scope_q(scope)``: ``scope`` itself and every scope beneath
#: it. Parameters: (canonical, canonical + "0", canonical, canonical + "/"); see _scope_params.
_WITHIN = '(s."scope" >= %s AND s."scope" < %s AND (s."scope" = %s OR s."scope" >= %s))'


#: A session that has not expired (docs/design.md §18.1): expired sessions are hidden from every
#: read and refuse appends before the sweep deletes them. The server's clock at the start of the
#: client's statement, as the ORM path compares ``expires_at`` with the app's clock.
_NOT_EXPIRED = '(s."expires_at" IS NULL OR s."expires_at" > statement_timestamp())'


#: :data:`_WITHIN` and :data:`_NOT_EXPIRED` for a row found by its primary key, which they only
#: filter: the same tests inside a ``CASE``, whose condition the planner does not estimate. Bare, the four
#: comparisons are estimated from the scope column's statistics (target 1,000) on every
#: unprepared call: ~0.25 ms of planning at ``large`` for a statement that runs in ~0.02 ms
#: (docs/performance.md). Same parameters as ``_WITHIN``.
_WITHIN_FILTER = f"CASE WHEN {_WITHIN} AND {_NOT_EXPIRED} THEN TRUE END"


def _scope_params(canonical: str) -> list[str]:
    return [canonical, canonical + "0", canonical, canonical + "/"]


def _get_statement() -> str:
    """The statement :data:`GET` runs: every column of the session ``id`` within a scope (and of
    one agent, unless that parameter is ``NULL``: ``agent_id`` is never null, so
    ``COALESCE(NULL, agent_id)`` is the row's own) as one text array, into the function's
    variable ``loaded``. Parameters: id, the four scope parameters, agent id or ``NULL``."""
    return _select_session(
        f's."id" = %s AND {_WITHIN_FILTER} AND s."agent_id" = COALESCE(%s, s."agent_id")'
    )


def _resolve_statement() -> str:
    """The statement :data:`RESOLVE` runs: :func:`_get_statement`'s array of the default
    session of an agent at exactly a scope (served by the partial unique index
    ``cortex_session_one_default``). Parameters: agent id, canonical scope."""
    return _select_session(
        f's."agent_id" = %s AND s."scope" = %s AND s."is_default" AND {_NOT_EXPIRED}'
    )


def _select_session(where: str) -> str:
    """Every column of the session row ``s`` matching ``where``, as one text array, into the
    read functions' variable ``loaded``."""
    return (
        f"SELECT ARRAY[{_text_columns(Session._meta.concrete_fields)}] INTO loaded"
        f" FROM {Session._meta.db_table} s WHERE {where}"
    )


def _text_columns(fields: Sequence[Any]) -> str:
    """``fields``' columns of the row ``s`` as the elements of a text array
    (``s."id"::text, …``)."""
    return ", ".join(f's."{field.column}"::text' for field in fields)


@cache
def _sql_append() -> str:
    """Append messages to an in-scope session in one statement.

    - ``s`` updates the session row: it takes the row lock (a concurrent append waits, then
      re-checks the ``WHERE`` on the row it committed, as ``SELECT … FOR UPDATE`` would), moves
      ``last_seq`` and ``message_count`` by the number of messages, sets ``updated_at`` (to
      the caller's time, or keeps the row's when that is later: the caller read its clock
      before waiting for the lock, and a concurrent append may have committed a later time
      meanwhile; the ORM path reads the clock under the lock) and,
      when the messages carry conversation text, ``last_message``; it returns the new row.
    - ``m`` inserts the messages, numbered ``last_seq - n + 1 … last_seq`` from the row ``s``
      returned, with the session's agent and scope; the inputs come as parallel arrays
      (``unnest … WITH ORDINALITY`` keeps their order), so one statement text serves any
      number of messages and prepares once.
    - The outer ``SELECT`` returns the session's columns once per message, with the message's
      id and seq. No row at all means no such live session within the scope (missing, foreign
      or archived, docs/design.md §11.2): nothing was written.

    Parameters: n, updated_at, last_message (NULL: keep), id, the four scope parameters,
    roles, sources, contents (JSON text), metadata (JSON text), created_at values.
    """
    return _append_statement(
        step="%s",
        values=(
            's."last_seq" - %s + v.ord, v.role, v.source, v.content::jsonb, v.metadata::jsonb,'
            " v.created_at FROM s, unnest(%s::text[], %s::text[], %s::text[], %s::text[],"
            " %s::timestamptz[]) WITH ORDINALITY AS v(role, source, content, metadata,"
            " created_at, ord)"
        ),
        order=' ORDER BY m."seq"',
    )


#: The PL/pgSQL function that appends one message (docs/design.md §14.1). Its name changes
#: with its statement or result (``_v2``: the narrow row of migration ``0014``; ``_v3``:
#: ``updated_at`` never moved back, migration ``0015``; ``_v4``: one ``text[]`` value instead
#: of a row, migration ``0016``), so code and database on two sides of a migration fail
#: before writing instead of after: code calling a function the database does not have yet
#: is refused at parse time, and the previous version stays for the code of the previous
#: release until a later migration drops it.
#: ``_v5`` (migration ``0020_retention``): the session's ``expires_at`` and ``legal_hold`` in the
#: row, and an expired session refused (docs/design.md §18.1).
APPEND_ONE = "cortex_sessions_append_one_v5"
#: The PL/pgSQL functions that read one session by id within a scope, and the default session
#: of an agent at a scope (migration ``0017_get_and_resolve_functions``), each returning every
#: column as one ``text[]`` value (``NULL``: no such session). Named by version as
#: :data:`APPEND_ONE` is: a change to the session's columns needs new ones.
#: ``_v2`` (migration ``0020_retention``): ``expires_at`` and ``legal_hold`` in the array, and an
#: expired session not returned (docs/design.md §18.1).
GET = "cortex_sessions_get_v2"
RESOLVE = "cortex_sessions_resolve_v2"


class _Function(NamedTuple):
    """A PL/pgSQL function of the hot paths (:func:`function_sql`)."""

    #: Argument types, in the order of the statement's ``%s`` placeholders.
    arguments: tuple[str, ...]
    #: The one statement it runs, selecting its result into ``variable``.
    statement: Callable[[], str]
    #: The ``text[]`` variable the statement fills and the function returns.
    variable: str
    #: ``STABLE`` (reads only) or ``""`` (``VOLATILE``, the default: it writes).
    volatility: str


@cache
def _functions() -> dict[str, _Function]:
    """The functions :func:`function_sql` creates, by name."""
    scope = ("text", "text", "text", "text")  # the four parameters of _scope_params
    return {
        APPEND_ONE: _Function(
            (
                "timestamptz",  # updated_at
                "text",  # last_message (NULL: keep)
                "uuid",  # session id
                *scope,
                "text",  # role
                "text",  # source
                "text",  # content (JSON text)
                "text",  # metadata (JSON text)
                "timestamptz",  # created_at
            ),
            _append_one_statement,
            "appended",
            "",
        ),
        GET: _Function(("uuid", *scope, "text"), _get_statement, "loaded", "STABLE"),
        RESOLVE: _Function(("text", "text"), _resolve_statement, "loaded", "STABLE"),
    }


@cache
def _sql_call(function: str) -> str:
    """The statement that calls ``function`` (:data:`APPEND_ONE`, :data:`GET` or
    :data:`RESOLVE`) with one ``%s`` per argument.

    Why a function: an unnamed statement is parsed and planned by the server on every call,
    which for the append is about a third of its time and for a read of one session (whose
    filter the planner estimates from the scope column's statistics, against each of the
    session's eight indexes) more than half (docs/performance.md); a prepared one is not, but
    lives in one server session, which poolers in transaction mode break
    (``PREPARED_STATEMENTS``, §14.2). PL/pgSQL plans the statements of a function once per
    server session and keeps the plan, invisibly to the client, so every pooler passes the
    call through and only the short call itself is planned each time.

    Why a scalar call (``SELECT f(…)``, not ``SELECT * FROM f(…)``): a function in ``FROM``
    is a table function, so the server plans a function scan, describes the result row from
    the function's declared columns and passes the row through two tuple stores (the
    function's ``RETURN QUERY`` and the scan's) on every call; a function returning one value
    is evaluated in the select list. For the append that is ~35 µs less server CPU a call,
    ~85 µs under 8 writer processes (docs/performance.md).
    """
    placeholders = ", ".join(["%s"] * len(_functions()[function].arguments))
    return f"SELECT {function}({placeholders})"


def _append_one_statement() -> str:
    """The statement :data:`APPEND_ONE` runs: :func:`_sql_append` for one message, with scalar
    parameters instead of ``unnest`` over arrays, selecting the narrow row of
    :func:`_narrow_session` into the function's variable ``appended``. Parameters:
    updated_at, last_message (NULL: keep), id, the four scope parameters, role, source,
    content (JSON text), metadata (JSON text), created_at."""
    array = f'{_text_columns(_narrow_fields())}, m."id"::text, m."seq"::text'
    return _append_statement(
        step="1",
        values='s."last_seq", %s, %s, %s::jsonb, %s::jsonb, %s FROM s',
        order="",
        result=f"ARRAY[{array}] INTO appended",
    )


#: Session fields whose value after an append the caller already has: the statement writes
#: only to a session whose ``archived_at`` is null.
_SET_BY_THE_APPEND = ("archived_at",)


@cache
def _narrow_fields() -> tuple[Any, ...]:
    """The session fields :data:`APPEND_ONE` returns as the elements of one text array, in
    model order; the new message's id and seq follow them there. The primary key and
    :data:`_SET_BY_THE_APPEND` are not sent: the caller has them.

    Why an array: sent unprepared, every result column costs the server and psycopg time on
    each call (prepared, a statement is described once), and the session's 17 columns made
    the call ~0.1 ms slower than the floor's prepared statement; one ``text[]`` (decoded by
    psycopg's C array loader) costs what one column costs (docs/performance.md).
    """
    return tuple(
        field
        for field in Session._meta.concrete_fields
        if not field.primary_key and field.name not in _SET_BY_THE_APPEND
    )


#: ``bool`` of PostgreSQL's text form of a boolean (a C call, where a lambda is a Python frame).
_BOOLEAN_TEXT = {"true": True, "false": False}.__getitem__


def _datetime_text(text: str, timezone: Any, session_zone: Any) -> datetime:
    """A ``timestamptz`` from its ``::text`` form, the value Django's loader makes of the
    column: psycopg's loader reads the text into the session's time zone (``session_zone``,
    psycopg's ``connection.info.timezone``: ``TimeZone``; ``astimezone`` sets the ``fold``
    that tells the two wall times of a repeated hour apart), then Django's relabels it with
    ``timezone``, the Django connection's (``None`` without ``USE_TZ``: a naive wall time).
    Django sets the session's ``TimeZone`` to that zone, so the relabelling changes nothing
    but the ``tzinfo`` object, unless the host changed the session's zone behind Django's
    back (``SET TIME ZONE``), or gave it none (``USE_TZ = False`` with ``TIME_ZONE = None``:
    the server's zone); the ORM's values are then what this returns too, ``fold`` included.

    The text is in the session's time zone and ``DateStyle`` ISO (which psycopg 3 requires),
    e.g. ``2026-12-02 13:55:00.123456+00``, which ``datetime.fromisoformat`` reads (Python
    3.11 and later) with ``datetime.timezone.utc`` for ``+00``. When Django and the session
    are both in UTC (psycopg's zone for ``UTC`` is that same object) the parsed value is the
    answer as it is (``replace(tzinfo=…)`` costs ten times what ``astimezone`` does). Only
    both: a session in Europe/London writes ``+00`` too, and in the hour London repeats the
    second wall time has ``fold`` 1.

    Args:
        text: the column's ``::text``.
        timezone: ``connection.timezone`` of the Django connection.
        session_zone: ``connection.connection.info.timezone``, the session's ``TimeZone``.

    Raises:
        django.db.DataError: a time Python's ``datetime`` cannot hold (before year 1 or after
            9999 in the session's time zone, which PostgreSQL writes with ``BC`` or five
            digits), as Django raises from psycopg's loader for the same column.
    """
    try:
        value = datetime.fromisoformat(text)
    except ValueError as error:
        raise DataError(f"timestamp out of Python's range: {text!r}") from error
    if value.tzinfo is timezone and session_zone is timezone:  # the usual case: all UTC
        return value
    with suppress(OverflowError):  # as psycopg's loader: next to the range's end, keep the offset
        value = value.astimezone(session_zone)
    return value.replace(tzinfo=timezone)


def _text_converter(field: Any) -> Any:
    """How the ``::text`` form of ``field``'s column becomes the value the ORM loads:
    ``convert(text)``, or ``None`` for text kept as it is. A timestamp's converter is
    :func:`_datetime_text`, which also takes the time zones.

    Built-in callables where they exist (``int``, a dict look-up): the append reads nine
    converted fields on every call (docs/performance.md).

    Raises:
        AssertionError: ``field`` is of a type this does not know, or a JSON field with a
            decoder of its own (a change to the model must add it; ``tests/test_hot_paths.py``
            compares every field with the ORM's).
    """
    kind = field.output_field if isinstance(field, GeneratedField) else field
    if isinstance(kind, DateTimeField):
        return _datetime_text
    if isinstance(kind, JSONField) and kind.decoder is None:
        return _json_value
    if isinstance(kind, BooleanField):
        return _BOOLEAN_TEXT
    if isinstance(kind, IntegerField):  # BigIntegerField and the other integers
        return int
    if isinstance(kind, UUIDField):
        return uuid.UUID
    # Text as it is; ScopeField.from_db_value only decodes the bytes MySQL drivers return.
    if isinstance(kind, CharField | TextField) and (
        isinstance(kind, ScopeField) or not hasattr(kind, "from_db_value")
    ):
        return None
    raise AssertionError(f"no text converter for {field!r}")  # pragma: no cover - a code change


@cache
def _text_plan(
    narrow: bool,
) -> tuple[tuple[str, ...], tuple[tuple[str, Any], ...], tuple[str, ...]]:
    """How a session's text array becomes the values the ORM loads: the narrow row of
    :func:`_narrow_fields` (``narrow``) or every concrete field (:data:`GET`,
    :data:`RESOLVE`), as the fields' attnames in array order, ``((attname, text converter),
    …)`` of those converted but timestamps, and the timestamps' attnames."""
    fields = _narrow_fields() if narrow else tuple(Session._meta.concrete_fields)
    converted = [(field.attname, _text_converter(field)) for field in fields]
    return (
        tuple(field.attname for field in fields),
        tuple(
            (attname, convert)
            for attname, convert in converted
            if convert is not None and convert is not _datetime_text
        ),
        tuple(attname for attname, convert in converted if convert is _datetime_text),
    )


def _session_values(
    connection: Any, array: Sequence[Any], session_zone: Any, narrow: bool
) -> dict[str, Any]:
    """The session's values by attname, as the ORM loads them, from the text array a
    function returned on ``connection`` with the session in ``session_zone`` (see
    :func:`_execute`; ``narrow``: :data:`APPEND_ONE`'s array, whose last two elements, the
    message's id and seq, no name takes)."""
    names, converters, times = _text_plan(narrow)
    values: dict[str, Any] = dict(zip(names, array, strict=False))
    for attname, convert in converters:
        text = values[attname]
        if text is not None:
            values[attname] = convert(text)
    timezone = connection.timezone
    for attname in times:
        text = values[attname]
        if text is not None:
            values[attname] = _datetime_text(text, timezone, session_zone)
    return values


def _narrow_session(
    alias: str,
    connection: Any,
    array: Sequence[Any],
    session_zone: Any,
    *,
    session_id: uuid.UUID,
) -> tuple[Session, int, int]:
    """The session, the new message's id and its seq, from the value :data:`APPEND_ONE`
    returned on ``connection`` (of ``alias``) with the session in ``session_zone``, as the ORM
    loads them; ``session_id`` is the one the append was called with."""
    values = _session_values(connection, array, session_zone, narrow=True)
    values[Session._meta.pk.attname] = session_id
    values["archived_at"] = None
    session = cast(Session, _loaded(Session, alias, values, _plain(Session)))
    return session, int(array[-2]), int(array[-1])


def _read_session(alias: str, function: str, params: list[Any]) -> Session | None:
    """Call :data:`GET` or :data:`RESOLVE` with ``params`` on ``alias``: the session as the ORM
    loads it, or ``None`` when there is none."""
    connection = connections[alias]
    rows, session_zone = _execute(connection, _sql_call(function), params, keep=True)
    array = rows[0][0]
    if array is None:
        return None
    values = _session_values(connection, array, session_zone, narrow=False)
    return cast(Session, _loaded(Session, alias, values, _plain(Session)))


def function_sql(function: str) -> tuple[str, str]:
    """The SQL that creates ``function`` (:data:`APPEND_ONE`, :data:`GET` or :data:`RESOLVE`)
    on PostgreSQL, and the SQL that drops it, as ``(create, drop)``.

    Each function runs one statement and returns one ``text[]`` value: the append the narrow
    row of :func:`_narrow_fields` (the session's fields, then the new message's ``id`` and
    ``seq``), the reads every column of the session; ``NULL`` when nothing was written or
    found. The migrations that create them hold a copy of this SQL (the squash
    ``0012_squashed_0018_search_and_functions`` all three; before it ``0016`` the append's and
    ``0017`` the reads'), frozen as
    migrations are; ``tests/test_hot_paths.py`` checks that they agree, so a change to the
    session's columns or to a statement comes with a migration that adds the function under a
    new name. When the app's migrations are disabled, :func:`create_functions` runs this SQL
    instead.

    Raises:
        KeyError: ``function`` is not one of the three.
    """
    spec = _functions()[function]
    pieces = spec.statement().split("%s")
    if len(pieces) != len(spec.arguments) + 1:  # pragma: no cover - a code change
        raise AssertionError(f"the statement and the arguments of {function} disagree")
    body = "".join(f"{piece}${number}" for number, piece in enumerate(pieces[:-1], 1))
    body += pieces[-1]
    signature = f"{function}({', '.join(spec.arguments)})"
    volatility = f" {spec.volatility}" if spec.volatility else ""
    create = (
        f"CREATE OR REPLACE FUNCTION {signature}"
        f" RETURNS text[] LANGUAGE plpgsql{volatility} AS $function$\n"
        "#variable_conflict use_column\n"
        f"DECLARE\n  {spec.variable} text[];\n"
        f"BEGIN\n  {body};\n  RETURN {spec.variable};\nEND\n$function$"
    )
    return create, f"DROP FUNCTION IF EXISTS {signature}"


def create_functions(*, app_config: Any, using: str, **kwargs: Any) -> None:
    """``post_migrate`` receiver: create :data:`APPEND_ONE`, :data:`GET` and :data:`RESOLVE`
    on a PostgreSQL database whose tables were made from the models because this app's
    migrations are disabled (a test database under pytest-django's ``--nomigrations`` or
    ``TEST["MIGRATE"] = False``), where neither the squash
    ``0012_squashed_0018_search_and_functions`` nor ``0016``/``0017`` ran. With migrations enabled it does nothing:
    the migrations own the functions.
    """
    from django.db import router
    from django.db.migrations.loader import MigrationLoader

    connection = connections[using]
    if connection.vendor != "postgresql" or not router.allow_migrate_model(using, Session):
        return
    if MigrationLoader.migrations_module(app_config.label)[0] is not None:
        return
    with connection.cursor() as cursor:
        for function in _functions():
            cursor.execute(function_sql(function)[0])


def _append_statement(*, step: str, values: str, order: str, result: str | None = None) -> str:
    """The append statement of :func:`_sql_append` and of :data:`APPEND_ONE`: the
    session update ``s`` moving ``last_seq`` and ``message_count`` by ``step`` (a placeholder or
    a literal), the message insert ``m`` selecting the session's id, agent and scope followed by
    ``values`` (the rest of the select list and its ``FROM``), and the outer select of
    ``result`` (default: the session's columns, then the message's ``id`` and ``seq``), ordered
    by ``order``.
    """
    if result is None:
        result = f'{_columns(Session, "s.")}, m."id", m."seq"'
    table = Session._meta.db_table
    return (
        f"WITH s AS ("
        f' UPDATE {table} s SET "last_seq" = s."last_seq" + {step},'
        f' "message_count" = s."message_count" + {step},'
        f' "updated_at" = GREATEST(s."updated_at", %s),'
        f' "last_message" = COALESCE(%s, s."last_message")'
        f' WHERE s."id" = %s AND s."archived_at" IS NULL AND {_WITHIN_FILTER}'
        f" RETURNING {_columns(Session, 's.')}"
        f"), m AS ("
        f" INSERT INTO {Message._meta.db_table}"
        f' ("session_id", "agent_id", "scope", "seq", "role", "source", "content", "metadata",'
        f' "created_at")'
        f' SELECT s."id", s."agent_id", s."scope", {values}'
        f' RETURNING "id", "seq"'
        f") SELECT {result} FROM s, m{order}"
    )


#: A page of messages reads every column but ``session_id``, which is the id asked for (no
#: need to send it and parse it back 50 times).
_PAGE_OMITS = "session"


def _fields(model: type[Model], omit: str | None = None) -> tuple[Any, ...]:
    """``model``'s concrete fields in order, without the one named ``omit``."""
    return tuple(field for field in model._meta.concrete_fields if field.name != omit)


@cache
def _sql_messages(after: bool, before: bool, forward: bool) -> str:
    """A page of one in-scope session's messages, with the scope check, in one statement.

    The session is read first (``s``: at most one row, by primary key and scope) and the page
    is a lateral subquery on ``(session_id, seq)`` — the unique index
    ``cortex_message_session_seq``, walked in ``seq`` order and stopped at ``limit`` — so an
    empty session still returns one row (of NULLs) and a session out of scope returns none.
    The subquery names the session id as a parameter rather than ``s.id``, so the planner
    knows which session it reads (a session of 100,000 messages is planned as one).

    Parameters: id, [after_seq], [before_seq], limit, id, the four scope parameters.
    """
    bounds = ""
    if after:
        bounds += ' AND m."seq" > %s'
    if before:
        bounds += ' AND m."seq" < %s'
    order = "ASC" if forward else "DESC"
    page_columns = ", ".join(f'p."{field.column}"' for field in _fields(Message, _PAGE_OMITS))
    return (
        f"SELECT {page_columns} FROM {Session._meta.db_table} s"
        f" LEFT JOIN LATERAL (SELECT {_columns(Message, 'm.')}"
        f' FROM {Message._meta.db_table} m WHERE m."session_id" = %s{bounds}'
        f' ORDER BY m."seq" {order} LIMIT %s) p ON TRUE'
        f' WHERE s."id" = %s AND {_WITHIN_FILTER}'
    )


# -- execution ------------------------------------------------------------------------------------


def _execute(
    connection: Any, sql: str, params: Sequence[Any], *, keep: bool = False
) -> tuple[list[tuple[Any, ...]], Any]:
    """Run one statement on Django ``connection`` through the cursor of :func:`_cursor`
    (server-side binding; prepared only with ``PREPARED_STATEMENTS``).

    Returns:
        ``(all its rows, the session's time zone when its result arrived)``: the zone
        (a ``tzinfo``) psycopg's loaders read that result's timestamps in, and so the one the
        ``::text`` of a timestamp in it is read in (:func:`_datetime_text`). It is read inside
        any ``execute_wrapper`` hooks, as psycopg reads it for the ORM's statements: a hook
        that sets the zone after the statement changes neither.

    Args:
        keep: run it on the cursor the connection keeps for statements that return a row or
            a few (append, get, resolve): see :class:`_KeptCursors`. A page of messages
            passes ``False`` and gets a cursor of its own, closed at once, so the connection
            never holds a large result between calls.

    With ``keep``, unprepared and nothing watching, the statement is sent by :func:`_send`,
    without the cursor's bookkeeping; where that declines, and otherwise, the cursor runs it.

    Timestamps are parsed by psycopg's own ``timestamptz`` loader (its C one with
    ``psycopg[binary]``) instead of the Python loader Django registers on its connections,
    which costs several microseconds a value (a third of a 50-message page's Python time);
    :func:`_instances` then sets the time zone exactly as Django's loader does (see
    :func:`_datetime_value`), so the values are the ORM's.
    """
    prepare = app_settings.PREPARED_STATEMENTS
    wrapper, cursor, kept = _cursor(connection, prepare=prepare, keep=keep)
    try:
        if wrapper is None:
            # Nothing logs and no hook listens: what Django's CursorWrapper.execute does then,
            # without building one and going through its three calls, which is measurable on
            # an append under eight writers, where each microsecond of Python is paid several
            # times over (docs/performance.md).
            connection.validate_no_broken_transaction()
            with connection.wrap_database_errors:
                if kept is not None and not prepare:
                    sent = _send(kept, cursor, sql, params)
                    if sent is not None:
                        return sent
                cursor.execute(sql, params)
                return cursor.fetchall(), cursor.result_zone
        wrapper.execute(sql, params)  # Django's wrapper: hooks, logging, error classes
        with connection.wrap_database_errors:
            return cursor.fetchall(), cursor.result_zone
    finally:
        if kept is None:
            cursor.close()
        else:
            kept.busy = False


@cache
def _numbered(sql: str) -> bytes:
    """``sql`` with its ``%s`` placeholders numbered (``$1``, ``$2``, …), as psycopg sends a
    statement, encoded. The hot paths' statements hold no other ``%``."""
    pieces = sql.split("%s")
    if any("%" in piece for piece in pieces):  # pragma: no cover - a code change
        raise AssertionError(f"a % other than a placeholder in {sql!r}")
    text = "".join(f"{piece}${number}" for number, piece in enumerate(pieces[:-1], 1))
    return (text + pieces[-1]).encode()


class _Psycopg(NamedTuple):
    """What :func:`_send` takes from psycopg 3 (all of it there since 3.1)."""

    execute: Any  # psycopg.generators.execute: send, then fetch every result, without blocking
    auto: Any  # psycopg.adapt.PyFormat.AUTO: each parameter's format as a cursor chooses it
    transformer: Any  # psycopg.adapt.Transformer: a context's dumpers and loaders
    in_transaction: Any  # psycopg.pq.TransactionStatus.INTRANS
    tuples_ok: Any  # psycopg.pq.ExecStatus.TUPLES_OK
    fatal_error: Any  # psycopg.pq.ExecStatus.FATAL_ERROR
    error_from_result: Any  # psycopg.errors.error_from_result: a failed result's exception
    internal_error: Any  # psycopg.errors.InternalError


@cache
def _psycopg() -> _Psycopg:
    """psycopg's parts :func:`_send` uses, imported once (psycopg is an optional dependency:
    only a PostgreSQL connection through psycopg 3 reaches here, see :func:`enabled`)."""
    from psycopg import errors
    from psycopg.adapt import PyFormat, Transformer
    from psycopg.generators import execute
    from psycopg.pq import ExecStatus, TransactionStatus

    return _Psycopg(
        execute,
        PyFormat.AUTO,
        Transformer,
        TransactionStatus.INTRANS,
        ExecStatus.TUPLES_OK,
        ExecStatus.FATAL_ERROR,
        errors.error_from_result,
        errors.InternalError,
    )


def _send(
    kept: _KeptCursors, cursor: Any, sql: str, params: Sequence[Any]
) -> tuple[list[tuple[Any, ...]], Any] | None:
    """Run one statement as ``cursor.execute(sql, params)`` then ``cursor.fetchall()`` would on
    the kept unprepared cursor ``cursor``, through its psycopg connection's libpq connection
    (``pgconn``) instead of the cursor: the same parameters (the cursor's dumpers, types and
    formats), the same protocol messages (one ``PQsendQueryParams``), psycopg's own wait for
    the result under the connection's lock (which cancels the statement on
    ``KeyboardInterrupt`` and yields to gevent), the cursor's loaders, and psycopg's error
    classes. What is left out is the cursor's bookkeeping around them (its query object,
    state and result sets): ~25 µs of Python an append, which eight writers on two CPUs pay
    several times over (docs/performance.md). The result is not kept.

    Returns:
        What :func:`_execute` returns, or ``None`` (nothing sent) when psycopg would send more
        than the statement: outside autocommit with no transaction begun yet (psycopg first
        sends its ``BEGIN``, with the connection's isolation level), or in pipeline mode; the
        caller then runs the cursor.

    Raises:
        psycopg.Error: as ``cursor.execute`` raises it (the caller turns it into Django's).
    """
    psycopg = _psycopg()
    raw = kept.raw
    pgconn = raw.pgconn
    if (not raw.autocommit and pgconn.transaction_status != psycopg.in_transaction) or (
        pgconn.pipeline_status
    ):
        return None
    transformer = kept.transformer
    if transformer is None:
        transformer = kept.transformer = psycopg.transformer.from_context(cursor)
    values = transformer.dump_sequence(params, [psycopg.auto] * len(params))
    with raw.lock:
        pgconn.send_query_params(
            _numbered(sql), values, param_types=transformer.types, param_formats=transformer.formats
        )
        results = raw.wait(psycopg.execute(pgconn))
    if not results:  # as the cursor checks its results
        raise psycopg.internal_error("got no result from the query")
    (result,) = results  # one statement, one result
    if result.status != psycopg.tuples_ok:
        if result.status == psycopg.fatal_error:
            raise psycopg.error_from_result(result, encoding=raw.info.encoding)
        raise psycopg.internal_error(f"unexpected result status from query: {result.status}")
    transformer.set_pgresult(result)
    try:
        return transformer.load_rows(0, result.ntuples, tuple), raw.info.timezone
    finally:
        transformer.set_pgresult(None)


@cache
def _timestamptz_loader() -> Any:
    """psycopg 3's default text loader of ``timestamptz``."""
    import psycopg
    from psycopg.postgres import types
    from psycopg.pq import Format

    return psycopg.adapters.get_loader(types["timestamptz"].oid, Format.TEXT)


@cache
def _cursor_class(prepare: bool) -> Any:
    """psycopg 3's server-binding cursor as Django configures it, sending every statement with
    ``prepare=prepare`` (``False``: an unnamed statement, parsed and planned each time, as
    every pooler allows; ``True``: a named one, prepared once per connection), and noting the
    session's time zone as each result arrives (``result_zone``)."""
    from django.db.backends.postgresql.base import ServerBindingCursor

    class HotPathCursor(ServerBindingCursor):
        #: The session's time zone when the last result arrived (see :func:`_execute`).
        result_zone: Any = None

        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            kwargs["prepare"] = prepare
            result = super().execute(query, params, **kwargs)  # type: ignore[misc]  # untyped
            self.result_zone = self.connection.info.timezone  # type: ignore[attr-defined]
            return result

    return HotPathCursor


@cache
def _debug_wrapper_class() -> Any:
    """Django's ``CursorDebugWrapper`` logging the statement with its parameters inlined, as
    the ORM's client-side cursors log theirs (``connection.ops.compose_sql``), so that
    ``CaptureQueriesContext`` and ``django.db.backends`` show a statement one can run: a
    server-binding cursor keeps only the ``$n`` form."""
    from django.db.backends.utils import CursorDebugWrapper, CursorWrapper

    class HotPathDebugWrapper(CursorDebugWrapper):
        def execute(self, sql: Any, params: Any = None) -> Any:
            with self.debug_sql(self.db.ops.compose_sql(sql, params), params):
                return CursorWrapper.execute(self, sql, params)

    return HotPathDebugWrapper


#: The attribute of a Django connection (``DatabaseWrapper``) that holds its
#: :class:`_KeptCursors`.
_KEPT = "_cortex_sessions_kept_cursors"


class _KeptCursors:
    """The hot-path cursors one Django connection keeps between calls, one per value of
    ``prepare``, each with the ``timestamptz`` loader of :func:`_execute` registered.

    Making a psycopg cursor copies the connection's adapters, and registering a loader copies
    them again; with the Django wrapper around it and its ``close`` that is a tenth of an
    append's time in Python. A cursor can run any number of statements, so the append, get
    and resolve reuse one. It belongs to the psycopg connection it was made on, and to the
    session's time zone and client encoding it was made in (``status``, see
    :func:`_session_status`: psycopg's loaders and dumpers take them when they are made, and
    a cursor may keep them from one statement to the next): after Django reconnects, or a
    host's ``SET TIME ZONE`` or ``SET client_encoding``, :func:`_cursor` makes new ones, and
    while an ``execute_wrapper`` hook is installed (it may set the zone right before
    the statement) it uses none. ``busy`` is set while a statement runs on a kept cursor, so a statement
    started meanwhile (re-entrantly, before the result is fetched) gets a cursor of its own
    instead of overwriting that result. ``transformer`` holds the unprepared cursor's dumpers and
    loaders for :func:`_send`.
    """

    __slots__ = ("busy", "cursors", "raw", "status", "transformer")

    def __init__(self, raw: Any, status: tuple[bytes | None, bytes | None]) -> None:
        self.raw = raw
        self.status = status
        self.cursors: dict[bool, Any] = {}
        self.transformer: Any = None
        self.busy = False


def _session_status(pgconn: Any) -> tuple[bytes | None, bytes | None]:
    """The server session's ``TimeZone`` and ``client_encoding`` (libpq's copy, no round trip),
    which the loaders and dumpers of a psycopg cursor take when they are made: a kept cursor
    serves only while they are what they were when it was made. Django sets ``UTF8`` on
    connecting; a host may change either later."""
    status = pgconn.parameter_status
    return status(b"TimeZone"), status(b"client_encoding")


def _new_cursor(raw: Any, prepare: bool) -> Any:
    """A psycopg cursor of :func:`_cursor_class` on psycopg connection ``raw``, reading
    ``timestamptz`` with :func:`_timestamptz_loader`."""
    cursor = _cursor_class(prepare)(raw)
    cursor.adapters.register_loader("timestamptz", _timestamptz_loader())
    return cursor


def _cursor(connection: Any, *, prepare: bool, keep: bool = False) -> tuple[Any, Any, Any]:
    """A Django cursor wrapper (query logging, ``execute_wrapper`` hooks, Django's error
    classes) around a psycopg 3 cursor that binds parameters on the server, as
    ``connection.cursor()`` would build one with another cursor class.

    Server-side binding sends the statement text and its parameters apart (``Parse``,
    ``Bind``, ``Execute`` in one round trip): psycopg does not quote every value into the
    text, which on an append is a third of the client's CPU, and the server does not parse
    the values back. Without ``prepare`` the statement is unnamed, which every pooler passes
    through (PgBouncer in transaction mode included).

    With ``prepare`` (``PREPARED_STATEMENTS``), the first call on a connection prepares the
    statement and later calls only bind and execute, skipping the planner. Prepared
    statements live in one server session, so they break under a pooler that hands a client's
    statements to several server sessions (PgBouncer in transaction or statement mode before
    1.21, or with ``max_prepared_statements = 0``); hence the setting is off by default.

    Returns:
        ``(cursor wrapper, psycopg cursor, kept)``: with ``keep``, the psycopg cursor is the one
        ``connection`` keeps (:class:`_KeptCursors`, returned as ``kept`` and marked busy;
        the caller clears ``busy`` when done and does not close it), and the wrapper is
        ``None`` when nothing would see it (no query logging): the caller runs the cursor as
        the wrapper would. Otherwise (without ``keep``, with an ``execute_wrapper`` hook, or
        while the kept cursor is busy) ``kept`` is ``None`` and the caller closes the cursor.
    """
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    connection.validate_thread_sharing()
    if keep:  # the usual case first: the kept cursor, free, and nothing watching
        kept = connection.__dict__.get(_KEPT)
        if (
            kept is not None
            and kept.raw is connection.connection
            and not kept.busy
            and not connection.queries_logged
            and not connection.execute_wrappers
        ):
            with connection.wrap_database_errors:  # a connection closed behind Django's back
                status = _session_status(kept.raw.pgconn)
            cursor = kept.cursors.get(prepare)
            if cursor is not None and kept.status == status:  # made below, threshold set
                kept.busy = True
                return None, cursor, kept
    with connection.wrap_database_errors:
        raw = connection.connection
        if prepare and raw.prepare_threshold is None:
            # Django turns psycopg's preparing off (``prepare_threshold = None``) unless the
            # host's OPTIONS set it, and then psycopg ignores ``prepare=True`` too. A threshold
            # no query reaches turns it back on for explicit requests only: Django's own
            # cursors bind client-side and never prepare anything.
            raw.prepare_threshold = 2**31 - 1
        # A hook runs between this choice and the statement, and may change the session's time
        # zone or encoding there (``SET TIME ZONE``), which a kept cursor's loaders would not
        # see: a cursor of its own then, whose adapters take them at the statement, as the ORM's.
        keep = keep and not connection.execute_wrappers
        kept = connection.__dict__.get(_KEPT) if keep else None
        if keep:
            status = _session_status(raw.pgconn)
            if kept is None or kept.raw is not raw or (kept.status != status and not kept.busy):
                kept = connection.__dict__[_KEPT] = _KeptCursors(raw, status)
        if kept is None or kept.busy:
            kept, cursor = None, _new_cursor(raw, prepare)
        else:
            cursor = kept.cursors.get(prepare)
            if cursor is None:
                cursor = kept.cursors[prepare] = _new_cursor(raw, prepare)
            kept.busy = True
    if connection.queries_logged:
        return _debug_wrapper_class()(cursor, connection), cursor, kept
    if kept is not None:  # and no hook
        return None, cursor, kept
    return connection.make_cursor(cursor), cursor, None


# -- rows to instances ----------------------------------------------------------------------------


def _json_value(text: Any, connection: Any = None) -> Any:
    """What ``JSONField.from_db_value`` (no custom decoder) makes of the column's text: the
    decoded JSON, or text that is not JSON as it is.

    ``{}`` (the usual ``metadata``) is not sent through the decoder, and other text goes
    straight to the decoder's scanner: PostgreSQL's ``jsonb`` output is one JSON value without
    surrounding white space, so ``json.loads``'s checks around it only cost time. Anything
    else (which ``jsonb`` never sends) takes ``json.loads``'s path, errors included.
    """
    if text == "{}":
        return {}
    try:
        value, end = _scan(text, 0)
    except (StopIteration, TypeError, ValueError):
        end = -1
    if end == len(text):
        return value
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


_scan: Any = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # untyped, always there


def _datetime_value(value: Any, connection: Any) -> Any:
    """A ``timestamptz`` as Django's loader returns it: psycopg's value (in the session's time
    zone, which Django sets) with the connection's ``timezone`` (UTC, or naive without
    ``USE_TZ``), as ``BaseTzLoader.load`` does. See :func:`_execute`."""
    timezone = connection.timezone
    return value if value.tzinfo is timezone else value.replace(tzinfo=timezone)


def _field_converter(field: Any) -> Any:
    if isinstance(field, JSONField) and field.decoder is None:
        return _json_value
    if isinstance(field, DateTimeField):
        return _datetime_value
    convert = field.from_db_value
    return lambda value, connection: convert(value, None, connection)


@cache
def _row_plan(
    model: type[Model], omit: str | None = None
) -> tuple[tuple[str, ...], tuple[tuple[int, Any], ...], bool]:
    """How rows of ``model``'s concrete fields but ``omit`` (columns in field order) become
    ``model`` instances.

    Returns:
        ``(attnames, (column position, converter) of each field with a ``from_db_value``,
        whether an instance may be built by filling its ``__dict__``)``. The last is ``True``
        when every field's attribute is a plain one (as Django's own fields are), so that
        ``Model.__init__`` would only have set the attributes (a foreign key's ``*_id`` setter
        does nothing more on a new instance).
    """
    fields = _fields(model, omit)
    attnames = tuple(field.attname for field in fields)
    converters = tuple(
        (index, _field_converter(field))
        for index, field in enumerate(fields)
        # ScopeField.from_db_value only decodes the bytes MySQL drivers return; psycopg
        # returns str.
        if (hasattr(field, "from_db_value") and not isinstance(field, ScopeField))
        or isinstance(field, DateTimeField)
    )
    plain = all(
        field.is_relation or not hasattr(type(getattr(model, field.attname, None)), "__set__")
        for field in model._meta.concrete_fields
    )
    return attnames, converters, plain


def _instances(
    model: type[Model],
    alias: str,
    rows: Sequence[Sequence[Any]],
    omit: str | None = None,
    **constant: Any,
) -> list[Any]:
    """Model instances of ``rows``, equal to what the ORM builds (each field's
    ``from_db_value``, then ``Model.from_db``: every concrete field loaded, not ``adding``,
    on ``alias``).

    Args:
        rows: the values of every concrete field but ``omit``, in field order.
        constant: the value of the omitted field (by attname), the same for every row.

    Without ``pre_init``/``post_init`` receivers on ``model`` (the usual case), the
    instances are built by filling their ``__dict__`` as ``Model.__init__`` would, without
    calling it: for a page of 50 messages that is most of the Python time
    (docs/performance.md). With a receiver connected, ``Model.from_db`` builds them, so
    receivers see every instance as before.
    """
    attnames, converters, _ = _row_plan(model, omit)
    plain = _plain(model)
    connection = connections[alias]
    new, state_class = model.__new__, ModelState
    instances = []
    for values in rows:
        row = list(values)
        for index, convert in converters:
            value = row[index]
            if value is not None:
                row[index] = convert(value, connection)
        if not plain:
            loaded = dict(zip(attnames, row, strict=True))
            loaded.update(constant)
            instances.append(_loaded(model, alias, loaded, plain))
            continue
        # _loaded's plain branch, inlined: this loop runs for every row of a page.
        instance = new(model)
        state = state_class()
        state.adding = False
        state.db = alias
        attributes = instance.__dict__
        attributes["_state"] = state
        attributes.update(zip(attnames, row, strict=True))
        attributes.update(constant)
        instances.append(instance)
    return instances


def _plain(model: type[Model]) -> bool:
    """Whether :func:`_loaded` may fill instances' ``__dict__`` (see :func:`_row_plan`): the
    fields allow it and no ``pre_init``/``post_init`` receiver listens."""
    return _row_plan(model)[2] and not (
        # ``receivers`` first: when no model has any (the usual case), no look-up by sender
        (pre_init.receivers and pre_init.has_listeners(model))
        or (post_init.receivers and post_init.has_listeners(model))
    )


def _loaded(model: type[Model], alias: str, values: dict[str, Any], plain: bool) -> Any:
    """One instance of ``model`` with every concrete field's value (by attname) loaded, as
    ``Model.from_db`` returns it; ``plain`` (from :func:`_plain`): without calling
    ``Model.__init__``, which would only set the same attributes. ``values`` is a dict of the
    caller's that nothing else holds: with ``plain`` it becomes the instance's ``__dict__``
    (no copy; the session and each message of an append are built this way)."""
    if not plain:
        full = [values[field.attname] for field in model._meta.concrete_fields]
        return model.from_db(alias, None, full)  # type: ignore[arg-type]  # None: all fields
    instance = model.__new__(model)
    state = values["_state"] = ModelState()
    state.adding = False
    state.db = alias
    instance.__dict__ = values
    return instance


def _instance(model: type[Model], alias: str, values: Sequence[Any]) -> Any:
    return _instances(model, alias, [values])[0]


# -- the hot paths --------------------------------------------------------------------------------


def get_session(
    alias: str, *, canonical: str, session_id: uuid.UUID, agent_id: str | None
) -> Session | None:
    """The session ``session_id`` within ``canonical`` (and of ``agent_id``), or ``None``: one
    call of :data:`GET`."""
    return _read_session(alias, GET, [session_id, *_scope_params(canonical), agent_id])


def resolve_default(alias: str, *, canonical: str, agent_id: str) -> Session | None:
    """The default session of ``agent_id`` at exactly ``canonical``, or ``None``: one call of
    :data:`RESOLVE`."""
    return _read_session(alias, RESOLVE, [agent_id, canonical])


def append_rows(
    alias: str,
    *,
    canonical: str,
    session_id: uuid.UUID,
    rows: Sequence[dict[str, Any]],
    json_texts: Sequence[tuple[str, str]],
    last_message: str | None,
    updated_at: datetime,
) -> tuple[Session, list[Message]] | None:
    """Append validated message ``rows`` (column values as ``messages._build_message`` makes
    them) to the session, in one statement (see :func:`_sql_append`; one message:
    :data:`APPEND_ONE`).

    Args:
        json_texts: each row's ``content`` and ``metadata`` as JSON text (validation encoded
            them already; ``jsonb`` stores the same value whatever the spacing).
        updated_at: the session's new ``updated_at``, unless the row holds a later one
            (which it keeps: ``updated_at`` never moves back).

    Returns:
        ``(session as updated, the new messages in seq order)``, or ``None`` when the session
        does not exist within ``canonical`` (nothing was written).
    """
    scope = _scope_params(canonical)
    if len(rows) == 1:
        (row,) = rows
        sql = _sql_call(APPEND_ONE)
        params = [
            updated_at,
            last_message,
            session_id,
            *scope,
            row["role"],
            row["source"],
            *json_texts[0],
            row["created_at"],
        ]
    else:
        count = len(rows)
        sql = _sql_append()
        params = [
            count,
            count,
            updated_at,
            last_message,
            session_id,
            *scope,
            count,
            [row["role"] for row in rows],
            [row["source"] for row in rows],
            [content for content, _ in json_texts],
            [metadata for _, metadata in json_texts],
            [row["created_at"] for row in rows],
        ]
    connection = connections[alias]
    result, session_zone = _execute(connection, sql, params, keep=True)
    if len(rows) == 1:  # the narrow row of APPEND_ONE, or NULL
        array = result[0][0]
        if array is None:
            return None
        session, message_id, seq = _narrow_session(
            alias, connection, array, session_zone, session_id=session_id
        )
        written = [(message_id, seq)]
    elif not result:
        return None
    else:
        width = len(Session._meta.concrete_fields)
        session = _instance(Session, alias, result[0][:width])
        written = [(values[width], values[width + 1]) for values in result]
    plain = _plain(Message)
    cache_session = _session_cache()
    messages = []
    for row, (message_id, seq) in zip(rows, written, strict=True):
        message = _loaded(
            Message,
            alias,
            {
                "id": message_id,
                "session_id": session_id,
                "agent_id": session.agent_id,
                "scope": session.scope,
                "seq": seq,
                **row,
            },
            plain,
        )
        cache_session(message, session)  # message.session is the session returned
        messages.append(message)
    return session, messages


@cache
def _session_cache() -> Any:
    """``Message.session``'s ``set_cached_value`` (a message's ``session`` without a query)."""
    return Message._meta.get_field("session").set_cached_value


def newest_messages(
    alias: str,
    *,
    canonical: str,
    session_id: uuid.UUID,
    limit: int,
    after_seq: int | None,
    before_seq: int | None,
) -> list[Message] | None:
    """A page of the session's messages in ``seq`` order, with the scope check, in one
    statement; the bounds mean what ``services.list_messages`` says.

    Returns:
        The messages (oldest first), or ``None`` when the session does not exist within
        ``canonical``.
    """
    forward = after_seq is not None and before_seq is None
    params: list[Any] = [session_id]
    if after_seq is not None:
        params.append(after_seq)
    if before_seq is not None:
        params.append(before_seq)
    params += [limit, session_id, *_scope_params(canonical)]
    sql = _sql_messages(after_seq is not None, before_seq is not None, forward)
    result, _ = _execute(connections[alias], sql, params)
    if not result:
        return None
    messages = _instances(
        Message,
        alias,
        [row for row in result if row[0] is not None],
        _PAGE_OMITS,
        session_id=session_id,
    )
    if not forward:
        messages.reverse()
    return messages
