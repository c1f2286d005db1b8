"""Running the hot-path statements of :mod:`._pg` and reading their rows back, on public APIs
only (docs/design.md §14; ``tests/test_pg_public.py`` checks for private names).

A statement runs on a Django cursor (:func:`execute`), so ``CaptureQueriesContext``,
``execute_wrapper`` hooks, query logging and Django's error classes see it as any ORM query.
Rows become model instances as the ORM builds them: each field's ``from_db_value``, then
``Model.from_db`` (:func:`built`); a session returned by a PL/pgSQL function as one ``text[]``
is first read back from text into what psycopg would have handed Django for each column
(:func:`text_values`). The PL/pgSQL functions of the hot paths (the core's and the LangGraph
saver's) are created by one builder, :func:`function_ddl`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from datetime import datetime
from decimal import Decimal
from functools import cache
from typing import Any, NamedTuple

from django.db import DataError
from django.db.models import (
    BooleanField,
    CharField,
    DateTimeField,
    DecimalField,
    GeneratedField,
    IntegerField,
    JSONField,
    Model,
    TextField,
    UUIDField,
)

from ..conf import app_settings

__all__ = [
    "PlpgsqlFunction",
    "TextPlan",
    "as_django_time",
    "built",
    "create_unmigrated_functions",
    "datetime_text",
    "execute",
    "function_ddl",
    "instances",
    "loaders",
    "messages_json",
    "text_plan",
    "text_values",
]


def execute(
    connection: Any,
    sql: str,
    params: Sequence[Any] | Mapping[str, Any],
    *,
    c_times: bool = False,
    server_binding: bool = False,
) -> tuple[list[tuple[Any, ...]], Any]:
    """Run one statement on Django ``connection`` through the cursor of :func:`_cursor`.

    Args:
        params: the statement's parameters, positional (``%s``) or named (``%(name)s``).
        server_binding: send the parameters apart from the statement (psycopg's
            server-side binding, never prepared unless ``PREPARED_STATEMENTS``), where
            Django's cursors write them into its text (:func:`_cursor`): for a call of a
            function, whose declared argument types leave the server nothing to infer, and
            for ``%b`` parameters, which go in binary (the LangGraph saver's checkpoint bytes
            and arrays) rather than as text escaped into the statement.
        c_times: read ``timestamptz`` columns with psycopg's default loader (its C one with
            ``psycopg[binary]``: ``psycopg.adapters.get_loader``) registered on this cursor,
            instead of the Python loader Django registers on its connections, which costs
            several microseconds a value; the caller relabels each value as Django's loader
            does (:func:`as_django_time`).

    Returns:
        ``(all its rows, the session's time zone)``: psycopg's ``info.timezone`` as the result
        arrived, the zone the ``::text`` of a timestamp in the rows is written in. Under a
        host's ``execute_wrapper`` hooks it is read inside them all (an innermost hook of its
        own), as psycopg reads the zone of the ORM's results: a hook that sets the zone after
        the statement changes no value.

    Raises:
        django.db.Error: as any ORM query raises it.
    """
    zones: list[Any] = []

    def note_zone(run: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        result = run(sql, params, many, context)
        zones.append(connection.connection.info.timezone)
        return result

    prepare = app_settings.PREPARED_STATEMENTS
    with _cursor(connection, prepare=prepare, server_binding=server_binding) as cursor:
        if c_times:
            cursor.cursor.adapters.register_loader("timestamptz", _default_time_loader())
        if connection.execute_wrappers:
            with connection.execute_wrapper(note_zone):
                cursor.execute(sql, params)
        else:
            cursor.execute(sql, params)
            zones.append(connection.connection.info.timezone)
        return cursor.fetchall(), zones[-1]


@cache
def _default_time_loader() -> Any:
    """psycopg's default text loader of ``timestamptz`` (public ``psycopg.adapters``)."""
    import psycopg
    from psycopg.pq import Format

    return psycopg.adapters.get_loader(psycopg.adapters.types["timestamptz"].oid, Format.TEXT)


def as_django_time(value: Any, timezone: Any) -> Any:
    """A ``timestamptz`` psycopg's default loader read (in the session's time zone) as Django's
    loader returns it: relabelled with the Django connection's ``timezone`` (UTC; ``None``
    without ``USE_TZ``: a naive wall time), as ``BaseTzLoader.load`` does."""
    if value is None or value.tzinfo is timezone:
        return value
    return value.replace(tzinfo=timezone)


def _cursor(connection: Any, *, prepare: bool, server_binding: bool = False) -> Any:
    """A Django cursor for a hot-path statement: ``connection.cursor()`` (parameters bound as
    Django binds them: client-side unless ``OPTIONS`` set ``server_side_binding``); with
    ``prepare`` (``PREPARED_STATEMENTS``) a ``psycopg.Cursor`` (server-side binding) sending
    each statement with ``prepare=True``, and with ``server_binding`` alone one sending it
    with ``prepare=False`` (an unnamed statement, as a pooler in transaction mode expects,
    whatever ``prepare_threshold`` the host set); either wrapped as ``connection.cursor()``
    wraps its own (:func:`_debug_wrapper` while queries are logged, else ``make_cursor``).
    Server-side binding skips the quoting of each parameter into the statement's text in
    Python (docs/performance.md).

    Prepared statements live in one server session, so they break under a pooler that hands a
    client's statements to several (PgBouncer in transaction mode before 1.21, or with
    ``max_prepared_statements = 0``): the setting is off by default. Django sets psycopg's
    ``prepare_threshold`` to ``None`` unless ``OPTIONS`` set it, and psycopg then ignores
    ``prepare=True``: a threshold no query reaches turns explicit requests back on (Django's
    own cursors bind client-side and never prepare).
    """
    if not (prepare or server_binding):
        return connection.cursor()
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    connection.validate_thread_sharing()
    with connection.wrap_database_errors:
        raw = connection.connection
        if prepare and raw.prepare_threshold is None:
            raw.prepare_threshold = 2**31 - 1
        cursor = _binding_cursor(prepare)(raw)
        # What Django's create_cursor does for its own: a time zone that is not the
        # connection's (USE_TZ or TIME_ZONE changed since it connected) gets a loader. Only
        # then: registering one copies the cursor's adapters map and makes a loader class,
        # which cost more than the rest of a get (docs/performance.md).
        oid, text, register_tzloader = _time_loading()
        loader = raw.adapters.get_loader(oid, text)  # the connection's, as Django registered it
        if getattr(loader, "timezone", _NO_ZONE) != connection.timezone:
            register_tzloader(connection.timezone, cursor)
    if connection.queries_logged:
        return _debug_wrapper()(cursor, connection)
    return connection.make_cursor(cursor)


#: The time zone of a ``timestamptz`` loader that is not Django's (it has none): never equal.
_NO_ZONE = object()


@cache
def _time_loading() -> tuple[int, Any, Any]:
    """``(the oid of timestamptz, psycopg's text format, Django's register_tzloader)``: what
    :func:`_cursor` needs to check a connection's ``timestamptz`` loader (the time zone Django
    gave it, public ``timezone`` of Django's loaders) as Django's ``create_cursor`` does."""
    import psycopg
    from django.db.backends.postgresql.psycopg_any import register_tzloader
    from psycopg.pq import Format

    return psycopg.adapters.types["timestamptz"].oid, Format.TEXT, register_tzloader


@cache
def _binding_cursor(prepare: bool) -> Any:
    """A ``psycopg.Cursor`` subclass (server-side binding) sending every statement with
    ``prepare=prepare``."""
    import psycopg

    class BindingCursor(psycopg.Cursor):
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            return super().execute(query, params, **{**kwargs, "prepare": prepare})

    return BindingCursor


@cache
def _debug_wrapper() -> Any:
    """Django's ``CursorDebugWrapper`` logging a statement with its parameters inlined
    (``connection.ops.compose_sql``), as the ORM's client-side cursors log theirs: a
    server-binding cursor keeps only the ``$n`` form, or nothing once prepared."""
    from django.db.backends.utils import CursorDebugWrapper, CursorWrapper

    class PreparedDebugWrapper(CursorDebugWrapper):
        def execute(self, sql: Any, params: Any = None) -> Any:
            with self.debug_sql(self.db.ops.compose_sql(sql, params), params):
                return CursorWrapper.execute(self, sql, params)

    return PreparedDebugWrapper


#: ``bool`` of PostgreSQL's text form of a boolean.
_BOOLEAN_TEXT = {"true": True, "false": False}.get


def datetime_text(text: str, timezone: Any, session_zone: Any) -> datetime:
    """A ``timestamptz`` from its ``::text`` form (``DateStyle`` ISO, :func:`serves`), as
    Django's loader makes the column: read in the session's time zone ``session_zone``
    (psycopg's ``info.timezone``; ``astimezone`` sets the ``fold`` of a repeated hour), then
    relabelled with ``timezone``, the Django connection's (``None`` without ``USE_TZ``: naive).
    Django sets the session to that zone, so only a host's ``SET TIME ZONE`` behind its back
    makes the two differ; the ORM's values are then what this returns too.

    Raises:
        django.db.DataError: a time Python's ``datetime`` cannot hold (before year 1 or after
            9999 in the session's zone), as Django raises from psycopg's loader.
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
    """How the ``::text`` of ``field``'s column becomes what psycopg hands Django for it:
    ``convert(text)``, ``None`` (text as it is; JSON too, which ``from_db_value`` decodes as
    it decodes the column Django reads as text), or :func:`datetime_text`.

    Raises:
        AssertionError: a field type this does not know (a model change must add it).
    """
    kind = field.output_field if isinstance(field, GeneratedField) else field
    for types, convert in _TEXT_CONVERTERS:
        if isinstance(kind, types):
            return convert
    raise AssertionError(f"no text converter for {field!r}")  # pragma: no cover - a code change


_TEXT_CONVERTERS: tuple[tuple[Any, Any], ...] = (
    (DateTimeField, datetime_text),
    (BooleanField, _BOOLEAN_TEXT),
    (IntegerField, int),  # BigIntegerField and the other integers
    (UUIDField, uuid.UUID),
    (DecimalField, Decimal),  # numeric's text is the value's exact digits
    (CharField | TextField | JSONField, None),
)


def loaders(fields: Sequence[Any]) -> tuple[tuple[int, Any], ...]:
    """``(position, from_db_value)`` of each of ``fields`` that has one, as the ORM applies them."""
    return tuple((i, f.from_db_value) for i, f in enumerate(fields) if hasattr(f, "from_db_value"))


class TextPlan(NamedTuple):
    """How a text array of some fields becomes their values (:func:`text_plan`)."""

    #: The fields' attnames, in array order.
    attnames: tuple[str, ...]
    #: ``(position, convert)`` of the fields converted from text, timestamps but.
    converters: tuple[tuple[int, Any], ...]
    #: Positions of the timestamps (:func:`datetime_text`).
    times: tuple[int, ...]
    #: ``(position, from_db_value)``, as :func:`loaders`.
    loaders: tuple[tuple[int, Any], ...]


def text_plan(fields: Sequence[Any]) -> TextPlan:
    """The :class:`TextPlan` of a text array of ``fields`` (their ``::text``, in order); the
    caller keeps it (building it costs more than using it)."""
    converted = [_text_converter(field) for field in fields]
    return TextPlan(
        tuple(field.attname for field in fields),
        tuple((i, c) for i, c in enumerate(converted) if c and c is not datetime_text),
        tuple(i for i, c in enumerate(converted) if c is datetime_text),
        loaders(fields),
    )


def text_values(
    connection: Any, array: Sequence[Any], session_zone: Any, plan: TextPlan
) -> list[Any]:
    """The values of the fields of ``plan`` (in its order) as the ORM loads them, from the
    text array a function returned on Django ``connection`` with the session in
    ``session_zone`` (its first ``len(plan.attnames)`` elements).

    Raises:
        django.db.DataError: a timestamp out of Python's range (:func:`datetime_text`).
    """
    values = list(array[: len(plan.attnames)])
    for index, convert in plan.converters:
        if values[index] is not None:
            values[index] = convert(values[index])
    timezone = connection.timezone
    for index in plan.times:
        if values[index] is not None:
            values[index] = datetime_text(values[index], timezone, session_zone)
    for index, load in plan.loaders:
        values[index] = load(values[index], None, connection)
    return values


def instances(
    connection: Any,
    alias: str,
    model: type[Model],
    rows: Sequence[Sequence[Any]],
    insert: tuple[int, Any] | None = None,
) -> list[Any]:
    """``model`` instances of ``rows`` (every concrete field, in order; with ``insert``, the
    row lacks the column at that position, whose value is given) as the ORM builds them read
    from ``alias``: timestamps relabelled as Django's loader does (:func:`as_django_time`,
    for rows read with ``c_times``; a no-op otherwise), each field's ``from_db_value``, then
    ``Model.from_db``. The per-model work (attnames, timestamp positions, loaders) is done
    once (:func:`_row_plan`); a page of 50 messages spends its time in ``from_db`` and the
    JSON loaders (docs/performance.md)."""
    names, times, field_loaders = _row_plan(model)
    timezone, from_db = connection.timezone, model.from_db
    built_rows = []
    for row in rows:
        values = list(row)
        if insert is not None:
            values.insert(*insert)
        for index in times:  # as_django_time, inlined: it runs for every row
            value = values[index]
            if value is not None and value.tzinfo is not timezone:
                values[index] = value.replace(tzinfo=timezone)
        for index, load in field_loaders:
            values[index] = load(values[index], None, connection)
        built_rows.append(from_db(alias, names, values))
    return built_rows


@cache
def _row_plan(model: type[Model]) -> tuple[list[str], tuple[int, ...], tuple[tuple[int, Any], ...]]:
    """``(attnames, positions of the DateTimeFields, loaders)`` of ``model``'s concrete fields,
    for :func:`instances` (a model's fields do not change while the process runs)."""
    fields = model._meta.concrete_fields
    names = [field.attname for field in fields]
    times = tuple(i for i, field in enumerate(fields) if isinstance(field, DateTimeField))
    return names, times, loaders(fields)


def built(model: type[Model], alias: str, values: dict[str, Any]) -> Any:
    """``model.from_db`` of ``values`` by attname: the concrete fields present loaded, any
    other deferred, as the ORM builds a row read from ``alias``.

    ``values`` holding every concrete field (the appends' session and messages) skips the
    scan for the present ones: the field order is read once per model (:func:`_attnames`).
    """
    names, every = _attnames(model)
    if len(values) != len(names) or not values.keys() >= every:  # some deferred (or extra)
        names = tuple(name for name in names if name in values)
    return model.from_db(alias, names, [values[name] for name in names])


@cache
def _attnames(model: type[Model]) -> tuple[tuple[str, ...], frozenset[str]]:
    """The attnames of ``model``'s concrete fields, in order and as a set (the models never
    change while the process runs)."""
    names = tuple(field.attname for field in model._meta.concrete_fields)
    return names, frozenset(names)


#: The JSON string of a role or a source (one of the few choices validation checked it against).
_json_string = cache(json.dumps)


def messages_json(
    rows: Sequence[dict[str, Any]], json_texts: Sequence[tuple[str, str, str | None]]
) -> str:
    """Messages to append as one JSON array of ``[role, source, content, metadata, created_at,
    usage, token count]`` arrays, the parameter of ``_pg.APPEND_MANY`` (docs/design.md §14).

    Args:
        rows: the messages' column values, validated (``message_input.build_message``).
        json_texts: each row's ``content``, ``metadata`` and ``usage`` (or ``None``) as the
            JSON text validation encoded: spliced in as they are, each one JSON value.

    Returns:
        The JSON text. ``created_at`` is written as psycopg writes a datetime parameter
        (``str()``: with its offset when aware; naive, the server reads it in the session's
        time zone, as it reads psycopg's). One text parameter costs one string escape, where
        seven arrays cost psycopg's Python array dumper per element (docs/performance.md).
    """
    quoted, items = _json_string, []
    for row, (content, metadata, usage) in zip(rows, json_texts, strict=True):
        stamp = datetime.isoformat(row["created_at"], " ")
        usage = "null" if usage is None else usage
        items.append(
            f'[{quoted(row["role"])},{quoted(row["source"])},{content},{metadata},"{stamp}",'
            f"{usage},{row['token_count']:d}]"
        )
    return f"[{','.join(items)}]"


class PlpgsqlFunction(NamedTuple):
    """A PL/pgSQL function of a hot path, running one statement (:func:`function_ddl`): the
    server plans a function's statement once per session and keeps the plan, behind any
    pooler (docs/design.md §14.1; ``_pg._sql_call`` says why)."""

    #: Argument types, in the order of the statement's ``%s`` placeholders.
    arguments: tuple[str, ...]
    #: The one statement it runs (built when asked: it names the models' tables and columns).
    statement: Callable[[], str]
    #: What it returns: a type, the value the statement selects into :attr:`variable`; or
    #: ``TABLE (…)``, the statement's rows (``RETURN QUERY``).
    returns: str
    #: The variable the statement fills and the function returns (unused with ``TABLE(…)``).
    variable: str = "result"
    #: ``STABLE`` (reads only) or ``""`` (``VOLATILE``, the default: it writes).
    volatility: str = ""
    #: Created with ``SET plan_cache_mode = force_generic_plan`` (the LangGraph saver's: PL/pgSQL
    #: keeps a plan only when the server picks the generic one).
    generic_plan: bool = False


def function_ddl(name: str, function: PlpgsqlFunction) -> tuple[str, str]:
    """The SQL that creates the PL/pgSQL function ``name`` on PostgreSQL, and the SQL that drops
    it, as ``(create, drop)``: the statement's ``%s`` placeholders become the arguments ``$1``,
    ``$2``, … in order. Migrations hold frozen copies of this SQL and tests check that they
    agree byte for byte, so a change to the text here changes every function's.

    Raises:
        AssertionError: the statement's placeholders and the arguments disagree in number (a
            code change).
    """
    pieces = function.statement().split("%s")
    if len(pieces) != len(function.arguments) + 1:  # pragma: no cover - a code change
        raise AssertionError(f"the statement and the arguments of {name} disagree")
    body = "".join(f"{piece}${number}" for number, piece in enumerate(pieces[:-1], 1))
    body += pieces[-1]
    signature = f"{name}({', '.join(function.arguments)})"
    volatility = f" {function.volatility}" if function.volatility else ""
    setting = " SET plan_cache_mode = force_generic_plan" if function.generic_plan else ""
    if function.returns.startswith("TABLE"):
        block = f"BEGIN\n  RETURN QUERY {body};\nEND"
    else:
        variable = function.variable
        block = (
            f"DECLARE\n  {variable} {function.returns};\n"
            f"BEGIN\n  {body};\n  RETURN {variable};\nEND"
        )
    create = (
        f"CREATE OR REPLACE FUNCTION {signature}"
        f" RETURNS {function.returns} LANGUAGE plpgsql{volatility}{setting} AS $function$\n"
        f"#variable_conflict use_column\n{block}\n$function$"
    )
    return create, f"DROP FUNCTION IF EXISTS {signature}"


def create_unmigrated_functions(
    app_config: Any, using: str, model: type[Model], functions: Mapping[str, PlpgsqlFunction]
) -> None:
    """What the ``post_migrate`` receivers that create an app's functions do: create
    ``functions`` (by name, :func:`function_ddl`) on database ``using`` when it is PostgreSQL,
    the router lets ``model`` (one of the app's) migrate there, and the app's migrations are
    disabled (pytest-django's ``--nomigrations``, ``TEST["MIGRATE"] = False``), so that its
    tables were made from the models and the migrations that create the functions did not
    run. With migrations enabled it does nothing: the migrations own the functions.

    Raises:
        django.db.Error: as any ORM query raises it.
    """
    from django.db import connections, router
    from django.db.migrations.loader import MigrationLoader

    connection = connections[using]
    if connection.vendor != "postgresql" or not router.allow_migrate_model(using, model):
        return
    if MigrationLoader.migrations_module(app_config.label)[0] is not None:
        return
    with connection.cursor() as cursor:
        for name, function in functions.items():
            cursor.execute(function_ddl(name, function)[0])
