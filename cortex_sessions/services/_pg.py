"""Hand-written SQL for the hot paths on PostgreSQL: one statement per call (docs/design.md §14).

Append, the newest messages (:mod:`._pg_page`), get and resolve — the calls an agent runtime
makes every turn — are one statement each here; everything else (and every other database) goes through the ORM.
The services in ``messages.py`` and ``sessions.py`` validate their arguments, then call
:func:`serves` and, on PostgreSQL, these functions instead of building querysets: the ORM has
no way to say "update this row and insert rows numbered from its new ``last_seq``" in one
statement, and building a queryset costs more than these statements take in the database.

Public APIs only (``tests/test_pg_public.py`` checks): statements run on a Django cursor
(``connections[alias].cursor()``, ``execute(sql, params)``), so ``CaptureQueriesContext``,
``execute_wrapper`` hooks, query logging and Django's error classes see them as any ORM
query; rows become instances through each field's ``from_db_value`` and ``Model.from_db``.
``CORTEX_SESSIONS["PREPARED_STATEMENTS"]`` (default off) prepares them: :func:`_cursor`.

The append calls the PL/pgSQL function :data:`APPEND_ONE` (one message) or :data:`APPEND_MANY`
(``0024_append_many_jsonb``), get and resolve call :data:`GET` and :data:`RESOLVE`
(``0020_retention``), the newest page of messages :data:`._pg_page.NEWEST`
(``0023_newest_page_function``; the page itself is :mod:`._pg_page`'s): the server plans a
function's statement once per session
and keeps it, whatever the pooler (:func:`_sql_call`). They return the session as one
``text[]`` (read back by :func:`._pg_run.text_values`). The scope predicate is
:func:`cortex_sessions.scope.scope_q`'s: an index range on the canonical string
(``COLLATE "C"``) plus a filter keeping exactly the scope and what lies beneath it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any

from django.db import connections
from django.db.models import Model

from ..models import IdempotencyKey, Message, Session
from ._pg_run import (
    PlpgsqlFunction,
    TextPlan,
    built,
    create_unmigrated_functions,
    execute,
    function_ddl,
    messages_json,
    text_plan,
    text_values,
)

__all__ = [
    "APPEND_MANY",
    "APPEND_ONE",
    "GET",
    "RESOLVE",
    "SCOPE_TYPES",
    "WITHIN_FILTER",
    "append_rows",
    "create_functions",
    "enabled",
    "function_sql",
    "get_session",
    "keyed_append",
    "resolve_default",
    "scope_params",
    "serves",
    "session_as_set_up",
]


@cache
def enabled(alias: str) -> bool:
    """Whether the hot-path SQL serves database ``alias``: PostgreSQL through psycopg 3 (whose
    ``info.timezone`` and ``prepare=True`` it uses); under psycopg 2, as on other databases,
    the ORM path does. Kept: an alias's backend never changes while the process runs."""
    if connections[alias].vendor != "postgresql":
        return False
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return bool(is_psycopg3)


def serves(alias: str) -> bool:
    """Whether the hot-path SQL serves this call on database ``alias``: :func:`enabled`, and the
    server session is as Django sets it up (``client_encoding`` ``UTF8``, ``DateStyle`` ISO),
    which the functions' ``text[]`` rows rely on; a host that changes either on a connection
    gets the ORM path meanwhile. Opens the connection if need be; reads psycopg's public
    ``info.parameter_status`` (no round trip).

    On a connection already open it leaves Django's checks (``CONN_HEALTH_CHECKS``' health
    check, ``ensure_connection``) to the cursor every hot path makes right after, which runs
    them as ``connection.cursor()`` does (:func:`._pg_run.execute`, or ``connection.cursor()``
    itself): checking twice cost each call a few microseconds, and a connection the check
    replaces is a new one Django set up as this one. The only way into the hot paths, the
    core's and the integrations' alike.

    Raises:
        django.db.Error: the connection cannot be opened, or was closed behind Django's back.
    """
    if not enabled(alias):
        return False
    connection = connections[alias]
    if connection.connection is None:
        connection.ensure_connection()
    return session_as_set_up(connection)


def session_as_set_up(connection: Any) -> bool:
    """Whether the server session of Django ``connection`` (open) is as Django sets it up:
    ``client_encoding`` ``UTF8``, ``DateStyle`` ISO (:func:`serves`), read from psycopg's
    public ``info.parameter_status`` (no round trip).

    Raises:
        django.db.Error: the connection was closed behind Django's back.
    """
    with connection.wrap_database_errors:
        status = connection.connection.info.parameter_status
        encoding, style = status("client_encoding"), status("DateStyle")
    return encoding == "UTF8" and style is not None and style.startswith("ISO")


# -- statements -----------------------------------------------------------------------------------


def _columns(model: type[Model], prefix: str = "") -> str:
    return ", ".join(f'{prefix}"{field.column}"' for field in model._meta.concrete_fields)


#: The canonical-string range of ``scope_q(scope)``: ``scope`` itself and every scope beneath
#: it. Parameters: (canonical, canonical + "0", canonical, canonical + "/"); see scope_params.
_WITHIN = '(s."scope" >= %s AND s."scope" < %s AND (s."scope" = %s OR s."scope" >= %s))'


#: A session that has not expired (docs/design.md §18.1): expired sessions are hidden from every
#: read and refuse appends before the sweep deletes them. The server's clock at the start of the
#: client's statement, as the ORM path compares ``expires_at`` with the app's clock.
_NOT_EXPIRED = '(s."expires_at" IS NULL OR s."expires_at" > statement_timestamp())'


#: The session row ``s`` lies within a scope and has not expired (docs/design.md §2.3, §18.1):
#: :data:`_WITHIN` and :data:`_NOT_EXPIRED` for a row found by its primary key, which they only
#: filter, inside a ``CASE``, whose condition the planner does not estimate. Bare, the four
#: comparisons are estimated from the scope column's statistics (target 1,000) on every
#: unprepared call: ~0.25 ms of planning at ``large`` for a statement that runs in ~0.02 ms
#: (docs/performance.md). Parameters: :func:`scope_params` (the LangGraph saver's too).
WITHIN_FILTER = f"CASE WHEN {_WITHIN} AND {_NOT_EXPIRED} THEN TRUE END"


#: The types of the four parameters of :data:`WITHIN_FILTER` (:func:`scope_params`), as a
#: function's arguments.
SCOPE_TYPES = ("text", "text", "text", "text")


def scope_params(canonical: str) -> list[str]:
    """The four parameters of :data:`WITHIN_FILTER` for the canonical scope string ``canonical``
    (``Scope.canonical``): ``[canonical, canonical + "0", canonical, canonical + "/"]``."""
    return [canonical, canonical + "0", canonical, canonical + "/"]


def _get_statement() -> str:
    """The statement :data:`GET` runs: every column of the session ``id`` within a scope (and of
    one agent, unless that parameter is ``NULL``: ``agent_id`` is never null, so
    ``COALESCE(NULL, agent_id)`` is the row's own) as one text array, into the function's
    variable ``loaded``. Parameters: id, the four scope parameters, agent id or ``NULL``."""
    return _select_session(
        f's."id" = %s AND {WITHIN_FILTER} AND s."agent_id" = COALESCE(%s, s."agent_id")'
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


def _append_many_statement() -> str:
    """The statement :data:`APPEND_MANY` runs: append messages to an in-scope session.

    - ``s`` updates the session row: it takes the row lock (a concurrent append waits, then
      re-checks the ``WHERE`` on the row it committed, as ``SELECT … FOR UPDATE`` would), moves
      ``last_seq`` and ``message_count`` by the number of messages, sets ``updated_at`` (to
      the caller's time, or keeps the row's when that is later: the caller read its clock
      before waiting for the lock, and a concurrent append may have committed a later time
      meanwhile; the ORM path reads the clock under the lock) and,
      when the messages carry conversation text, ``last_message``; it returns the new row.
    - ``m`` inserts the messages, numbered ``last_seq - n + 1 … last_seq`` from the row ``s``
      returned, with the session's agent and scope; they come as one JSON array
      (:func:`._pg_run.messages_json`; ``WITH ORDINALITY`` keeps their order), parsed once
      as ``jsonb``: a ``json`` value is parsed again by each operator that reads it, which
      for a turn of two messages cost ~0.1 ms of the server's time (``_v1``,
      docs/performance.md). A ``null`` usage is read with ``->>`` (SQL ``NULL``, not JSON
      ``null``).
    - The result is :func:`_narrow_fields`' array of the session, followed by the new
      messages' ids in ``seq`` order, into the function's variable ``appended``; ``NULL``
      when there is no such live session within the scope (missing, foreign, expired or
      archived, docs/design.md §11.2): nothing was written.

    Parameters: n, n, the four totals (input tokens, output tokens, cost, context tokens),
    updated_at, last_message (NULL: keep), id, the four scope parameters, n, the messages
    (JSON text).
    """
    narrow = f"(SELECT ARRAY[{_text_columns(_narrow_fields())}] FROM s)"
    return _append_statement(
        step="%s",
        values=(
            's."last_seq" - %s + v.ord, v.e ->> 0, v.e ->> 1, v.e -> 2, v.e -> 3,'
            " (v.e ->> 4)::timestamptz, (v.e ->> 5)::jsonb, (v.e ->> 6)::integer"
            " FROM s, jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS v(e, ord)"
        ),
        result=f'{narrow} || array_agg(m."id"::text ORDER BY m."seq") INTO appended',
        source="m",
    )


#: The PL/pgSQL function that appends one message (docs/design.md §14.1). Its name changes
#: with its statement or result (``_v2``-``_v4``: migrations ``0014``-``0016``; ``_v5``: usage
#: totals, ``usage`` and ``token_count``, ``0019``; ``_v6``: ``expires_at`` and ``legal_hold``,
#: an expired session refused, ``0020``), so code and database on two sides of a migration
#: fail at parse time, before writing; a later migration drops the old version.
APPEND_ONE = "cortex_sessions_append_one_v6"
#: The PL/pgSQL function that appends several messages (docs/design.md §14.1), versioned as
#: :data:`APPEND_ONE` (``_v1``: migration ``0022_append_many_function``; ``_v2``: the messages
#: parsed as ``jsonb``, ``0024_append_many_jsonb``).
APPEND_MANY = "cortex_sessions_append_many_v2"
#: The PL/pgSQL functions that read one session by id within a scope, and the default session
#: of an agent at a scope, each returning every column as one ``text[]`` (``NULL``: none);
#: versioned as :data:`APPEND_ONE` (``_v2``: the usage totals, ``0019_context_window``;
#: ``_v3``: ``expires_at``, ``legal_hold``, an expired session hidden, ``0020_retention``).
GET = "cortex_sessions_get_v3"
RESOLVE = "cortex_sessions_resolve_v3"


@cache
def _functions() -> dict[str, PlpgsqlFunction]:
    """The functions :func:`function_sql` creates, by name."""
    from ._pg_page import NEWEST, newest_function  # it imports this module

    scope = SCOPE_TYPES
    # The session's update: the four totals to add (input tokens, output tokens, cost,
    # context tokens), updated_at, last_message (NULL: keep), session id, the scope.
    update = ("bigint", "bigint", "numeric", "bigint", "timestamptz", "text", "uuid", *scope)
    return {
        APPEND_ONE: PlpgsqlFunction(
            (
                *update,
                "text",  # role
                "text",  # source
                "text",  # content (JSON text)
                "text",  # metadata (JSON text)
                "timestamptz",  # created_at
                "text",  # usage (JSON text or NULL)
                "integer",  # token count
            ),
            _append_one_statement,
            "text[]",
            "appended",
        ),
        # n twice (last_seq, message_count), the update, n (the first seq), the messages
        # (JSON text, ._pg_run.messages_json)
        APPEND_MANY: PlpgsqlFunction(
            ("bigint", "bigint", *update, "bigint", "text"),
            _append_many_statement,
            "text[]",
            "appended",
        ),
        GET: PlpgsqlFunction(
            ("uuid", *scope, "text"), _get_statement, "text[]", "loaded", "STABLE"
        ),
        RESOLVE: PlpgsqlFunction(
            ("text", "text"), _resolve_statement, "text[]", "loaded", "STABLE"
        ),
        NEWEST: newest_function(),
    }


@cache
def _sql_call(function: str) -> str:
    """The statement that calls ``function`` (:data:`APPEND_ONE`, :data:`APPEND_MANY`,
    :data:`GET` or :data:`RESOLVE`; a table function such as :data:`._pg_page.NEWEST` is
    called in ``FROM``) with one ``%s`` per argument.

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
    spec = _functions()[function]
    placeholders = ", ".join(["%s"] * len(spec.arguments))
    if spec.returns.startswith("TABLE"):  # a table function: its rows
        return f"SELECT * FROM {function}({placeholders})"
    return f"SELECT {function}({placeholders})"


def _append_one_statement() -> str:
    """The statement :data:`APPEND_ONE` runs: :func:`_append_many_statement` for one message,
    with scalar parameters instead of a JSON array, selecting the narrow row of
    :func:`_narrow_fields` into the function's variable ``appended``. Parameters: the four
    totals (input tokens, output tokens, cost, context tokens), updated_at, last_message
    (NULL: keep), id, the four scope parameters, role, source, content (JSON text), metadata
    (JSON text), created_at, usage (JSON text or NULL), token count."""
    array = f'{_text_columns(_narrow_fields())}, m."id"::text, m."seq"::text'
    return _append_statement(
        step="1",
        values='s."last_seq", %s, %s, %s::jsonb, %s::jsonb, %s, %s::jsonb, %s FROM s',
        result=f"ARRAY[{array}] INTO appended",
        source="s, m",
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


def _read_session(alias: str, function: str, params: list[Any]) -> Session | None:
    """Call :data:`GET` or :data:`RESOLVE` with ``params`` on ``alias``: the session as the ORM
    loads it, or ``None`` when there is none."""
    connection = connections[alias]
    rows, session_zone = execute(connection, _sql_call(function), params, server_binding=True)
    if rows[0][0] is None:
        return None
    plan = _session_plan(narrow=False)
    values = text_values(connection, rows[0][0], session_zone, plan)
    return Session.from_db(alias, plan.attnames, values)


@cache
def _session_plan(*, narrow: bool) -> TextPlan:
    """How a session's text array becomes its values: :data:`APPEND_ONE`'s (``narrow``,
    :func:`_narrow_fields`), or every concrete field, as :data:`GET` and :data:`RESOLVE`
    return them."""
    return text_plan(_narrow_fields() if narrow else Session._meta.concrete_fields)


def function_sql(function: str) -> tuple[str, str]:
    """The SQL that creates ``function`` (:data:`APPEND_ONE`, :data:`APPEND_MANY`, :data:`GET`,
    :data:`RESOLVE` or :data:`._pg_page.NEWEST`) on PostgreSQL, and the SQL that drops it, as
    ``(create, drop)``.

    Each function (built by :func:`._pg_run.function_ddl`, as the LangGraph saver's) runs one
    statement. The first four return one ``text[]`` value: the appends
    the narrow row of :func:`_narrow_fields` (the session's fields, then the new message's
    ``id`` and ``seq``, or the new messages' ids), the reads every column of the session;
    ``NULL`` when nothing was written or found. :data:`._pg_page.NEWEST` returns the rows of
    its statement (``RETURN QUERY``). The migrations that create them hold a copy of this SQL
    (``0020_retention`` the three first, ``0024_append_many_jsonb`` and
    ``0023_newest_page_function`` one each), frozen as migrations are;
    ``tests/test_hot_paths.py`` and ``tests/test_pg_newest_page.py`` check that they agree, so
    a change to the session's or message's columns or to a statement comes with a migration
    that adds the function under a new name. When the app's migrations are disabled,
    :func:`create_functions` runs this SQL instead.

    Raises:
        KeyError: ``function`` is not one of the five.
    """
    return function_ddl(function, _functions()[function])


def create_functions(*, app_config: Any, using: str, **kwargs: Any) -> None:
    """``post_migrate`` receiver: create :data:`APPEND_ONE`, :data:`APPEND_MANY`, :data:`GET`,
    :data:`RESOLVE` and :data:`._pg_page.NEWEST` on a PostgreSQL database whose tables were
    made from the models because this app's migrations are disabled (a test database under pytest-django's
    ``--nomigrations`` or ``TEST["MIGRATE"] = False``), where the migrations that create them
    (:func:`function_sql`) did not run. With migrations enabled it does nothing: the
    migrations own the functions.
    """
    create_unmigrated_functions(app_config, using, Session, _functions())


def _append_statement(*, step: str, values: str, result: str, source: str) -> str:
    """The append statement of :data:`APPEND_ONE` and :data:`APPEND_MANY`: the
    session update ``s`` moving ``last_seq`` and ``message_count`` by ``step`` (a placeholder or
    a literal) and the usage totals by four parameters (input tokens, output tokens, cost,
    context tokens: docs/design.md §16.1-§16.2), the message insert ``m`` selecting the session's id, agent and scope followed by
    ``values`` (the rest of the select list and its ``FROM``), and the outer select of
    ``result`` (with its ``INTO``) from ``source``.
    """
    table = Session._meta.db_table
    return (
        f"WITH s AS ("
        f' UPDATE {table} s SET "last_seq" = s."last_seq" + {step},'
        f' "message_count" = s."message_count" + {step},'
        f' "input_tokens" = s."input_tokens" + %s, "output_tokens" = s."output_tokens" + %s,'
        f' "cost" = s."cost" + %s, "context_tokens" = s."context_tokens" + %s,'
        f' "updated_at" = GREATEST(s."updated_at", %s),'
        f' "last_message" = COALESCE(%s, s."last_message")'
        f' WHERE s."id" = %s AND s."archived_at" IS NULL AND {WITHIN_FILTER}'
        f" RETURNING {_columns(Session, 's.')}"
        f"), m AS ("
        f" INSERT INTO {Message._meta.db_table}"
        f' ("session_id", "agent_id", "scope", "seq", "role", "source", "content", "metadata",'
        f' "created_at", "usage", "token_count")'
        f' SELECT s."id", s."agent_id", s."scope", {values}'
        f' RETURNING "id", "seq"'
        f") SELECT {result} FROM {source}"
    )


# -- the hot paths --------------------------------------------------------------------------------


def get_session(
    alias: str, *, canonical: str, session_id: uuid.UUID, agent_id: str | None
) -> Session | None:
    """The session ``session_id`` within ``canonical`` (and of ``agent_id``), or ``None``: one
    call of :data:`GET`. Raises ``django.db.Error`` as the ORM would."""
    return _read_session(alias, GET, [session_id, *scope_params(canonical), agent_id])


def resolve_default(alias: str, *, canonical: str, agent_id: str) -> Session | None:
    """The default session of ``agent_id`` at exactly ``canonical``, or ``None``: one call of
    :data:`RESOLVE`. Raises ``django.db.Error`` as the ORM would."""
    return _read_session(alias, RESOLVE, [agent_id, canonical])


@cache
def keyed_append(recorded: bool = False) -> str:
    """:data:`APPEND_ONE`'s call that also records an idempotency key (docs/design.md §12.1):
    the key's row (``status_code`` 0, ``response`` the new message's id as a JSON list, as
    ``keyed_append.append_once`` records it) is inserted in the append's own statement, after the
    append and only when it wrote. A duplicate waits on the session's row lock, then fails on
    the key's unique index and rolls back whole. Parameters: :data:`APPEND_ONE`'s, then scope,
    endpoint, key, fingerprint, created_at; ``recorded`` (the API's append) takes status code,
    tag and message JSON before created_at and records ``[tag, message, the narrow array]``."""
    table, status = IdempotencyKey._meta.db_table, "%s" if recorded else "0"
    answer = "%s::text, %s::json, a.r" if recorded else "a.r[cardinality(a.r) - 1]::bigint"
    return (
        f"WITH a AS ({_sql_call(APPEND_ONE)} AS r), k AS (INSERT INTO {table}"
        ' ("scope", "endpoint", "key", "fingerprint", "status_code", "response", "created_at")'
        f" SELECT %s, %s, %s, %s, {status}, json_build_array({answer})::text,"
        " %s FROM a WHERE a.r IS NOT NULL) SELECT a.r FROM a"
    )


def append_rows(
    alias: str,
    *,
    canonical: str,
    session_id: uuid.UUID,
    rows: Sequence[dict[str, Any]],
    json_texts: Sequence[tuple[str, str, str | None]],
    last_message: str | None,
    updated_at: datetime,
    totals: Sequence[Any],
    key: Sequence[Any] = (),
    instances: bool = True,
) -> tuple[Session, list[Message]] | None:
    """Append validated message ``rows`` (column values as ``message_input.build_message`` makes
    them) to the session, in one statement: a call of :data:`APPEND_ONE` (one message) or
    :data:`APPEND_MANY`, whose plan the server keeps (:func:`_sql_call`), sent with its
    parameters apart (server-side binding, :func:`._pg_run.execute`; never prepared unless
    ``PREPARED_STATEMENTS``); with ``key``, :func:`keyed_append`'s statement, bound as
    Django binds (client-side unless ``OPTIONS`` say otherwise).

    Args:
        json_texts: each row's ``content``, ``metadata`` and ``usage`` (or ``None``) as JSON
            text (validation encoded them already; ``jsonb`` stores the same value whatever
            the spacing).
        totals: what the rows add to the session's input tokens, output tokens, cost
            (``Decimal``) and context tokens (``usage.Totals``, docs/design.md §16.1-§16.2).
        updated_at: the session's new ``updated_at``, unless the row holds a later one
            (which it keeps: ``updated_at`` never moves back).
        key: one message only: ``(scope, endpoint, key, fingerprint, created_at)`` of an
            idempotency key recorded in the same statement (:func:`keyed_append`); eight
            values: its ``recorded`` form.
        instances: ``False``: the new messages are not built (the list returned is empty),
            for a caller that reads no row and has no ``messages_appended`` receiver to send
            them to (``messages.append_built``): two instances cost about a tenth of a
            LangChain turn's client time (docs/performance.md).

    Returns:
        ``(session as updated, the new messages in seq order)``, or ``None`` when the session
        does not exist within ``canonical`` (nothing was written).

    Raises:
        django.db.IntegrityError: the ``key`` was recorded first (nothing was written).
        django.db.Error: as the ORM would.
    """
    scope, count = scope_params(canonical), len(rows)
    params = [*totals, updated_at, last_message, session_id, *scope]
    if count == 1:
        (row,) = rows
        sql = keyed_append(len(key) == 8) if key else _sql_call(APPEND_ONE)
        content, metadata, usage = json_texts[0]
        params += [row["role"], row["source"], content, metadata, row["created_at"], usage]
        params += [row["token_count"], *key]
    else:
        sql = _sql_call(APPEND_MANY)
        params = [count, count, *params, count, messages_json(rows, json_texts)]
    connection = connections[alias]
    # A call of a function alone goes with server-side binding (no quoting of each parameter
    # into the text in Python: ~25 µs less client CPU an append, the server's unchanged); the
    # keyed statement (a CTE around the call) stays bound as Django binds: bound apart, the
    # server spent ~40 µs more on it than the client saved (docs/performance.md).
    server_binding = not key
    result, session_zone = execute(connection, sql, params, server_binding=server_binding)
    if (array := result[0][0]) is None:  # the narrow array and the new ids, or NULL
        return None
    plan = _session_plan(narrow=True)
    width = len(plan.attnames)
    loaded = text_values(connection, array, session_zone, plan)
    values = dict(zip(plan.attnames, loaded, strict=True))
    values.update({"id": session_id, "archived_at": None})
    session: Session = built(Session, alias, values)
    if not instances:
        return session, []
    if count == 1:
        written = [(int(array[-2]), int(array[-1]))]
    else:
        first = session.last_seq - count + 1
        written = [(int(pk), first + offset) for offset, pk in enumerate(array[width:])]
    messages = []
    for row, (message_id, seq) in zip(rows, written, strict=True):
        common = {"id": message_id, "agent_id": session.agent_id, "scope": session.scope}
        message = built(Message, alias, {**row, **common, "seq": seq, "session_id": session_id})
        message.session = session  # cached: message.session needs no query
        messages.append(message)
    return session, messages
