"""Message search: find sessions and messages by what was said (docs/design.md §11.5).

Only *conversation* text is searched (docs/design.md §3.2): ``assistant`` messages and ``user``
messages whose source is ``user`` or ``checkpoint``. Tool output, system prompts, messages the
host injected and session-reference snapshots are never matched.

PostgreSQL: full-text search. ``cortex_sessions_message.search_vector`` is a stored generated
``tsvector`` column of the conversation text (``NULL`` for every other message) with a GIN index,
and session titles have a GIN expression index; the query is parsed by ``websearch_to_tsquery``
(quoted phrases, ``or``, ``-word``), hits are ranked by ``ts_rank`` and snippets made by
``ts_headline``. The text search configuration is the setting ``SEARCH_CONFIG`` (default
``simple``) at the time the column was built; ``manage.py cortex_sessions_search_rebuild``
rebuilds column and indexes for the configured one, and the system check ``W002`` says when they
differ. The column is not a model field: it exists on PostgreSQL only, and keeping it out of the
model keeps it out of every ``SELECT`` of messages (the hot paths of docs/design.md §14 read every
model column).

SQLite: a case-insensitive substring of the same text (ASCII letters fold, as SQLite's
``lower()``), no rank; snippets are cut around the first hit in Python.

MySQL/MariaDB: no search; a query is refused with ``InvalidFilter`` (400 ``invalid_filter``),
never answered as "match all" (docs/design.md §15).

Why a row matched (:class:`SearchMatch`, its HTML-safe snippet) is read by
:mod:`cortex_sessions.matches`, which the models import instead of this module.
"""

from __future__ import annotations

import re
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.functions import Coalesce, Greatest, JSONObject

from . import search_limits as limits
from .content import check_json_value
from .exceptions import InvalidFilter
from .matches import START_MARK, STOP_MARK, SearchMatch, match_of

__all__ = [
    "INDEXED_CHARS",
    "MAX_QUERY_CHARS",
    "MESSAGE_INDEX",
    "QUERY_PATTERN",
    "SEARCH_COLUMN",
    "TITLE_INDEX",
    "SearchMatch",
    "check_query",
    "config_sql",
    "create_index_statements",
    "drop_statements",
    "filter_messages",
    "filter_sessions",
    "installed_config",
    "match_of",
    "search_available",
    "search_vendor",
]

#: The generated ``tsvector`` column of ``cortex_sessions_message`` (PostgreSQL only).
SEARCH_COLUMN = "search_vector"
#: GIN index of :data:`SEARCH_COLUMN`.
MESSAGE_INDEX = "cortex_msg_search_idx"
#: GIN expression index of the session title's ``tsvector``.
TITLE_INDEX = "cortex_session_title_search_idx"
#: Longest query accepted, in characters.
MAX_QUERY_CHARS = 1000
#: Characters of a message's text that PostgreSQL indexes (and ``ts_headline`` reads): a
#: ``tsvector`` holds at most 1 MiB, which a 1 MiB message of distinct words would exceed.
INDEXED_CHARS = 100_000

MESSAGE_TABLE = "cortex_sessions_message"
SESSION_TABLE = "cortex_sessions_session"

#: A text search configuration name, optionally schema-qualified; interpolated into SQL, so
#: nothing else is accepted.
CONFIG_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}(?:\.[A-Za-z_][A-Za-z0-9_]{0,62})?")

#: The strings of the message's text blocks, as a JSON array (jsonpath, IMMUTABLE).
_TEXTS = (
    "jsonb_path_query_array({content}, "
    '\'$[*] ? (@.type == "text" && @.text.type() == "string").text\')'
)
#: Conversation messages (docs/design.md §3.2), as :data:`cortex_sessions.counters.CONVERSATION_Q`.
_CONVERSATION = "({role} = 'assistant' OR ({role} = 'user' AND {source} IN ('user', 'checkpoint')))"


def config_sql(config: Any) -> str:
    """The SQL literal of a text search configuration: ``'simple'::regconfig``.

    Raises:
        ImproperlyConfigured: ``config`` is not a configuration name (letters, digits and ``_``,
            optionally ``schema.name``); the system check ``cortex_sessions.E013`` says so at
            start-up.
    """
    if not isinstance(config, str) or not CONFIG_PATTERN.fullmatch(config):
        raise ImproperlyConfigured(
            f"CORTEX_SESSIONS['SEARCH_CONFIG'] is {config!r}; use the name of a PostgreSQL "
            "text search configuration such as 'simple' or 'english'."
        )
    return f"'{config}'::regconfig"


def vector_sql(config: str) -> str:
    """The generation expression of :data:`SEARCH_COLUMN`: the ``tsvector`` of the first
    :data:`INDEXED_CHARS` characters of a conversation message's text, ``NULL`` for any other
    message. Immutable, as a generated column needs: the configuration is a constant, and the
    text is the JSON text of the array of text-block strings with its escapes (``\\n``,
    ``\\"``, ``\\u0007``…) turned into spaces.
    """
    texts = _TEXTS.format(content='"content"')
    conversation = _CONVERSATION.format(role='"role"', source='"source"')
    unescaped = (
        f"regexp_replace({texts}::text, '\\\\(?:[bfnrt\"\\\\/]|u[0-9a-fA-F]{{4}})', ' ', 'g')"
    )
    return (
        f"CASE WHEN {conversation} THEN "
        f"to_tsvector({config_sql(config)}, left({unescaped}, {INDEXED_CHARS})) END"
    )


def title_vector_sql(config: str, column: str = '"title"') -> str:
    """The ``tsvector`` of a session title, as :data:`TITLE_INDEX` indexes it."""
    return f"to_tsvector({config_sql(config)}, {column})"


def message_text_sql(content: str) -> str:
    """The text of a message (its text blocks joined by ``\\n``, docs/design.md §3.2), its first
    :data:`INDEXED_CHARS` characters, without the snippet marks."""
    texts = _TEXTS.format(content=content)
    return (
        "translate(left((SELECT string_agg(t.value, E'\\n' ORDER BY t.n) "
        f"FROM jsonb_array_elements_text({texts}) WITH ORDINALITY AS t(value, n)), "
        f"{INDEXED_CHARS}), '{START_MARK}{STOP_MARK}', '')"
    )


def add_column_statement(config: str) -> str:
    """``ALTER TABLE … ADD COLUMN search_vector … GENERATED ALWAYS AS (…) STORED``.

    Rewrites the message table under an ``ACCESS EXCLUSIVE`` lock (docs/search.md: how long).
    """
    return (
        f'ALTER TABLE "{MESSAGE_TABLE}" ADD COLUMN IF NOT EXISTS "{SEARCH_COLUMN}" tsvector '
        f"GENERATED ALWAYS AS ({vector_sql(config)}) STORED"
    )


def create_index_statements(config: str) -> list[str]:
    """``CREATE INDEX CONCURRENTLY`` of both GIN indexes (run outside a transaction; writes go
    on while they build)."""
    return [
        f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{MESSAGE_INDEX}" ON "{MESSAGE_TABLE}" '
        f'USING gin ("{SEARCH_COLUMN}")',
        f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{TITLE_INDEX}" ON "{SESSION_TABLE}" '
        f"USING gin (({title_vector_sql(config)}))",
    ]


def drop_statements() -> list[str]:
    """Drop both indexes (concurrently) and the column: the schema before message search."""
    return [
        f'DROP INDEX CONCURRENTLY IF EXISTS "{TITLE_INDEX}"',
        f'DROP INDEX CONCURRENTLY IF EXISTS "{MESSAGE_INDEX}"',
        f'ALTER TABLE "{MESSAGE_TABLE}" DROP COLUMN IF EXISTS "{SEARCH_COLUMN}"',
    ]


def drop_invalid_indexes(connection: BaseDatabaseWrapper) -> None:
    """Drop what a failed ``CREATE INDEX CONCURRENTLY`` left behind (an ``INVALID`` index of the
    same name, which ``IF NOT EXISTS`` would otherwise keep)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname IN (%s, %s) AND NOT i.indisvalid",
            [MESSAGE_INDEX, TITLE_INDEX],
        )
        for (name,) in cursor.fetchall():
            cursor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')


_INSTALLED = re.compile(r"to_tsvector\('([^']+)'::regconfig")


def installed_config(connection: BaseDatabaseWrapper) -> str | None:
    """The text search configuration :data:`SEARCH_COLUMN` was built with, or ``None`` when the
    column does not exist (not PostgreSQL, or not migrated yet)."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d "
            "JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum "
            "WHERE d.adrelid = to_regclass(%s) AND a.attname = %s AND NOT a.attisdropped",
            [MESSAGE_TABLE, SEARCH_COLUMN],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    found = _INSTALLED.search(row[0])
    return found.group(1) if found else None


def config_exists(connection: BaseDatabaseWrapper, config: str) -> bool:
    """Whether PostgreSQL has the text search configuration ``config`` (``pg_ts_config``;
    an unqualified name must be visible on the search path)."""
    schema, _, name = config.rpartition(".")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_ts_config c "
            "JOIN pg_namespace n ON n.oid = c.cfgnamespace WHERE c.cfgname = %s "
            "AND (n.nspname = %s OR (%s = '' AND pg_ts_config_is_visible(c.oid))))",
            [name, schema, schema],
        )
        row = cursor.fetchone()
    return bool(row and row[0])


# -- queries --------------------------------------------------------------------------------------


def search_available(connection: BaseDatabaseWrapper) -> bool:
    """Whether ``connection`` has message search (PostgreSQL, SQLite; not MySQL/MariaDB)."""
    return connection.vendor in ("postgresql", "sqlite")


def search_vendor(connection: BaseDatabaseWrapper) -> str:
    """``"postgresql"`` or ``"sqlite"``: how ``connection`` searches.

    Raises:
        InvalidFilter: the database has no message search (MySQL/MariaDB): a query is refused,
            never answered as if no filter had been given.
    """
    if search_available(connection):
        return str(connection.vendor)
    raise InvalidFilter(
        "q (message search) is not available on MySQL/MariaDB; use PostgreSQL (full-text "
        "search) or SQLite (substring), or search titles with 'search'.",
        field="q",
    )


#: What a query may not consist of only: ASCII spaces, tabs and line breaks.
BLANK = " \t\n\r\f\v"
#: The rules of :func:`check_query` as a JSON-schema (ECMA-262) pattern (word limit included).
QUERY_PATTERN = limits.QUERY_PATTERN


def check_query(q: Any) -> str:
    """Validate a search query: a string of 1 to :data:`MAX_QUERY_CHARS` characters holding a
    character other than :data:`BLANK`, at most ``MAX_QUERY_WORDS`` (16) words
    (:func:`~cortex_sessions.search_limits.query_words`), no NUL and no lone surrogate.

    Returns:
        ``q`` unchanged.

    Raises:
        InvalidFilter: not a string, blank, too long, or of too many words.
        NulCharacter, InvalidText: NUL or a lone surrogate.
    """
    if not isinstance(q, str):
        raise InvalidFilter(f"q must be a string; got {q!r}.", field="q")
    check_json_value(q, field="q")
    if not q.strip(BLANK):
        raise InvalidFilter(
            "q must hold something besides spaces, tabs and line breaks; leave it out to list "
            "without searching.",
            field="q",
        )
    if len(q) > MAX_QUERY_CHARS:
        raise InvalidFilter(
            f"q is {len(q)} characters; at most {MAX_QUERY_CHARS} are allowed.", field="q"
        )
    if limits.query_words(q) > limits.MAX_QUERY_WORDS:
        raise InvalidFilter(limits.too_many_words_message(q), field="q")
    return q


# -- query expressions ----------------------------------------------------------------------------


class _TableColumn(models.Func):
    """A column of the table that model field ``anchor`` belongs to, under that table's alias in
    the query (``"U0"."search_vector"`` inside a subquery): for columns that are not model
    fields."""

    def __init__(self, anchor: str, column: str) -> None:
        super().__init__(models.F(anchor), output_field=models.TextField())
        self.column = column

    def as_sql(
        self,
        compiler: Any,
        connection: Any,
        function: str | None = None,
        template: str | None = None,
        arg_joiner: str | None = None,
        **extra_context: Any,
    ) -> Any:
        sql, params = compiler.compile(self.source_expressions[0])
        table = sql.rsplit(".", 1)[0]
        return f"{table}.{connection.ops.quote_name(self.column)}", params


def _func(
    template: str, *expressions: Any, output_field: models.Field[Any, Any], joiner: str = ", "
) -> models.Func:
    return models.Func(
        *expressions, template=template, arg_joiner=joiner, output_field=output_field
    )


class _Search:
    """The expressions of one query ``q`` on one database (PostgreSQL or SQLite)."""

    def __init__(self, q: str, vendor: str, config: str) -> None:
        self.q = q
        self.postgres = vendor == "postgresql"
        self.config = config
        if self.postgres:
            config_sql(config)  # refuses a malformed name before it reaches SQL

    # PostgreSQL ----------------------------------------------------------------------------

    def _tsquery(self) -> models.Func:
        return _func(
            f"websearch_to_tsquery({config_sql(self.config)}, %(expressions)s)",
            models.Value(self.q),
            output_field=models.TextField(),
        )

    def _at_at(self, vector: Any, *, indexed: bool = True) -> models.Func:
        return _func(
            "(%(expressions)s)" if indexed else "((%(expressions)s) IS TRUE)",
            vector,
            self._tsquery(),
            output_field=models.BooleanField(),
            joiner=" @@ ",
        )

    def _rank(self, vector: Any) -> models.Func:
        return _func(
            "ts_rank(%(expressions)s)", vector, self._tsquery(), output_field=models.FloatField()
        )

    def _headline(self, text: Any) -> models.Func:
        """``ts_headline`` of ``text`` for the query's distinct words (bounded work)."""
        distinct = _func(
            limits.headline_query_sql("%(expressions)s"),
            self._tsquery(),
            output_field=models.TextField(),
        )
        return _func(
            f"ts_headline({config_sql(self.config)}, %(expressions)s)",
            text,
            distinct,
            models.Value(HEADLINE_OPTIONS),
            output_field=models.TextField(),
        )

    def _title_vector(self) -> models.Func:
        return _func(
            title_vector_sql(self.config, "%(expressions)s"),
            models.F("title"),
            output_field=models.TextField(),
        )

    def _vector(self) -> _TableColumn:
        return _TableColumn("id", SEARCH_COLUMN)

    # SQLite ----------------------------------------------------------------------------------

    def _contains(self, text: Any) -> models.Func:
        """``text`` holds ``q``, ASCII letters folded (SQLite's ``lower()``)."""
        return _func(
            "(instr(%(expressions)s) > 0)",
            _func("lower(%(expressions)s)", text, output_field=models.TextField()),
            _func("lower(%(expressions)s)", models.Value(self.q), output_field=models.TextField()),
            output_field=models.BooleanField(),
        )

    # both -------------------------------------------------------------------------------------

    def message_text(self) -> models.Func:
        """The text of the query's message (its text blocks joined by ``\\n``)."""
        template = message_text_sql("%(expressions)s") if self.postgres else _SQLITE_TEXT
        return _func(template, models.F("content"), output_field=models.TextField())

    def message_conditions(self, *, indexed: bool = True) -> list[Any]:
        """The conditions "this message matches" (conversation messages only: on PostgreSQL
        every other message has no vector).

        Args:
            indexed: ``False`` for the messages of one session, read by its ``(session, seq)``
                index: the condition is then written so that PostgreSQL does not also read the
                GIN index for every session (a ``BitmapAnd`` costing the word's whole posting
                list per session).
        """
        if self.postgres:
            return [self._at_at(self._vector(), indexed=indexed)]
        return [_conversation_q(), self._contains(self.message_text())]

    def title_matches(self) -> Any:
        """The condition "this session's title matches"."""
        if self.postgres:
            return self._at_at(self._title_vector())
        return self._contains(models.F("title"))

    def message_rank(self) -> Any:
        """The rank of the query's message (PostgreSQL), or ``NULL``."""
        if self.postgres:
            return self._rank(self._vector())
        return models.Value(None, output_field=models.FloatField())

    def title_rank(self) -> Any:
        """The rank of the query's session title when it matches, else 0 (PostgreSQL)."""
        return models.Case(
            models.When(self.title_matches(), then=self._rank(self._title_vector())),
            default=models.Value(0.0),
            output_field=models.FloatField(),
        )

    def message_hit(self) -> Any:
        """The JSON object :func:`match_of` reads for the query's message."""
        if self.postgres:
            return JSONObject(
                seq=models.F("seq"),
                rank=self.message_rank(),
                snippet=self._headline(self.message_text()),
            )
        return JSONObject(seq=models.F("seq"), text=self.message_text(), q=models.Value(self.q))

    def title_hit(self) -> Any:
        """The JSON object :func:`match_of` reads for a title match."""
        if self.postgres:
            return JSONObject(snippet=self._headline(models.F("title")))
        return JSONObject(text=models.F("title"), q=models.Value(self.q))


#: ``ts_headline`` options: one passage of 12 to 30 words around the best cover of the query,
#: hits between the private-use marks (turned into ``<mark>`` after escaping).
HEADLINE_OPTIONS = (
    f'StartSel="{START_MARK}", StopSel="{STOP_MARK}", MinWords=12, MaxWords=30, ShortWord=2'
)

#: SQLite: a message's text, as :func:`cortex_sessions.content.content_text` computes it.
_SQLITE_TEXT = (
    "(SELECT group_concat(json_extract(b.value, '$.text'), char(10)) "
    "FROM json_each(%(expressions)s) AS b WHERE b.type = 'object' "
    "AND json_extract(b.value, '$.type') = 'text' "
    "AND json_type(b.value, '$.text') = 'text')"
)


def _conversation_q() -> models.Q:
    from .counters import CONVERSATION_Q

    return CONVERSATION_Q


def filter_sessions(
    queryset: Any,
    *,
    q: str,
    scope_q: models.Q,
    connection: BaseDatabaseWrapper,
    annotate: bool = True,
) -> Any:
    """``queryset`` (sessions) narrowed to those whose conversation messages or title match
    ``q``, annotated with ``search_rank`` (PostgreSQL; ``NULL`` on SQLite) and ``search_hit``
    (read by :attr:`cortex_sessions.models.Session.search_match`).

    The candidates are the newest ``SEARCH_CANDIDATES`` matching messages of the listed
    sessions, and as many matching titles: the database reads the hits of a rare word from the
    GIN index, the messages of a narrow scope through its sessions, and for a word in every
    other message walks the newest messages until it has enough, so no search reads all
    matches of a common word (docs/search.md). The rank and the snippet are correlated
    subqueries over a candidate session's matching messages, the snippet computed only for
    the rows returned.

    Args:
        queryset: a Session queryset already limited to the caller's scope and filters.
        q: the query, checked by :func:`check_query`.
        scope_q: the caller's scope predicate (``scope_q(scope, exact=…)``), applied to the
            messages searched as well.
        connection: the database the queryset reads.
        annotate: add ``search_rank`` and ``search_hit`` (``False`` for a count).

    Raises:
        InvalidFilter: the database has no search (MySQL/MariaDB).
    """
    from .conf import app_settings
    from .models import Message

    search = _Search(q, search_vendor(connection), _config())
    limit = app_settings.SEARCH_CANDIDATES
    matching = Message.objects.filter(*search.message_conditions()).order_by()
    message_hits = (
        matching.filter(scope_q, session__in=queryset.order_by().values("pk"))
        .order_by("-id")
        .values("session_id")[:limit]
    )
    title_hits = queryset.filter(search.title_matches()).order_by("-id").values("id")[:limit]
    if connection.features.supports_slicing_ordering_in_compound:
        queryset = queryset.filter(pk__in=message_hits.union(title_hits, all=True))
    else:  # SQLite: no LIMIT inside UNION; the title is checked row by row
        queryset = queryset.filter(models.Q(pk__in=message_hits) | models.Q(search.title_matches()))
    if not annotate:
        return queryset
    best = Message.objects.filter(
        *search.message_conditions(indexed=False), session=models.OuterRef("pk")
    ).order_by()
    rank: Any = models.Value(None, output_field=models.FloatField())
    if search.postgres:
        best = best.annotate(rank=search.message_rank()).order_by("-rank", "-seq")
        rank = Greatest(
            Coalesce(models.Subquery(best.values("rank")[:1]), 0.0),
            search.title_rank(),
        )
    else:
        best = best.order_by("-seq")
    hit = Coalesce(
        models.Subquery(best.values(hit=search.message_hit())[:1]),
        models.Case(models.When(search.title_matches(), then=search.title_hit())),
        output_field=models.JSONField(),
    )
    return queryset.annotate(search_rank=rank, search_hit=hit)


def filter_messages(queryset: Any, *, q: str, connection: BaseDatabaseWrapper) -> Any:
    """``queryset`` (messages) narrowed to the conversation messages matching ``q``, annotated
    with ``search_hit`` (read by :attr:`cortex_sessions.models.Message.search_match`).

    Raises:
        InvalidFilter: the database has no search (MySQL/MariaDB).
    """
    search = _Search(q, search_vendor(connection), _config())
    return queryset.filter(*search.message_conditions()).annotate(search_hit=search.message_hit())


def _config() -> str:
    from .conf import app_settings

    return app_settings.SEARCH_CONFIG
