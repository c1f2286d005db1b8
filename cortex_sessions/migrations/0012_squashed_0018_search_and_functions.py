"""The message search schema and the PL/pgSQL functions of the hot paths, each created once in
its final form (docs/design.md §4, §11.5, §14.1).

Made with ``manage.py squashmigrations cortex_sessions 0012_message_search 0018`` and edited by
hand, as Django's documentation allows. It replaces ``0012_message_search`` to
``0018_drop_pre_release_append_functions``: of the append function only the version the code
calls (``cortex_sessions_append_one_v4`` of ``0016``) is created, none of the three that ``0013``
to ``0015`` created and ``0018`` dropped. A database that applied some of those originals but
not all goes on with the originals; the originals are deleted in the release after 1.0
(docs/design.md §4).

On PostgreSQL only (vendor-conditional operations; other databases get nothing here):
- the message search column and its two GIN indexes (``0012``), built ``CONCURRENTLY``, so this
  migration is not atomic;
- ``cortex_sessions_append_one_v4``, ``cortex_sessions_get_v1`` and
  ``cortex_sessions_resolve_v1``. The SQL below is a frozen copy of ``_pg.function_sql``;
  ``tests/test_squashed_migrations.py`` checks that they agree. A later change to a function
  adds it under a new name in a new migration (docs/design.md §14.1).

Backward, the functions, the indexes and the column are dropped.
"""

from __future__ import annotations

from django.db import migrations

from cortex_sessions.migrations._operations import MessageSearchSchema, OnVendors

CREATE_APPEND_ONE = (
    "CREATE OR REPLACE FUNCTION cortex_sessions_append_one_v4(timestamptz, text, uuid, text,"
    " text, text, text, text, text, text, text, timestamptz) RETURNS text[] LANGUAGE plpgsql AS"
    " $function$\n"
    "#variable_conflict use_column\n"
    "DECLARE\n"
    "  appended text[];\n"
    "BEGIN\n"
    '  WITH s AS ( UPDATE cortex_sessions_session s SET "last_seq" = s."last_seq" + 1,'
    ' "message_count" = s."message_count" + 1, "updated_at" = GREATEST(s."updated_at", $1),'
    ' "last_message" = COALESCE($2, s."last_message") WHERE s."id" = $3 AND s."archived_at" IS'
    ' NULL AND CASE WHEN (s."scope" >= $4 AND s."scope" < $5 AND (s."scope" = $6 OR s."scope"'
    ' >= $7)) THEN TRUE END RETURNING s."id", s."agent_id", s."scope", s."title", s."metadata",'
    ' s."cwd", s."message_count", s."last_message", s."last_seq", s."is_default",'
    ' s."default_flag", s."backfilled_by", s."created_at", s."updated_at", s."archived_at",'
    ' s."forked_from", s."forked_at_seq"), m AS ( INSERT INTO cortex_sessions_message'
    ' ("session_id", "agent_id", "scope", "seq", "role", "source", "content", "metadata",'
    ' "created_at") SELECT s."id", s."agent_id", s."scope", s."last_seq", $8, $9, $10::jsonb,'
    ' $11::jsonb, $12 FROM s RETURNING "id", "seq") SELECT ARRAY[s."agent_id"::text,'
    ' s."scope"::text, s."title"::text, s."metadata"::text, s."cwd"::text,'
    ' s."message_count"::text, s."last_message"::text, s."last_seq"::text,'
    ' s."is_default"::text, s."default_flag"::text, s."backfilled_by"::text,'
    ' s."created_at"::text, s."updated_at"::text, s."forked_from"::text,'
    ' s."forked_at_seq"::text, m."id"::text, m."seq"::text] INTO appended FROM s, m;\n'
    "  RETURN appended;\n"
    "END\n"
    "$function$"
)

DROP_APPEND_ONE = (
    "DROP FUNCTION IF EXISTS cortex_sessions_append_one_v4(timestamptz, text, uuid, text, text,"
    " text, text, text, text, text, text, timestamptz)"
)

CREATE_GET = (
    "CREATE OR REPLACE FUNCTION cortex_sessions_get_v1(uuid, text, text, text, text, text)"
    " RETURNS text[] LANGUAGE plpgsql STABLE AS $function$\n"
    "#variable_conflict use_column\n"
    "DECLARE\n"
    "  loaded text[];\n"
    "BEGIN\n"
    '  SELECT ARRAY[s."id"::text, s."agent_id"::text, s."scope"::text, s."title"::text,'
    ' s."metadata"::text, s."cwd"::text, s."message_count"::text, s."last_message"::text,'
    ' s."last_seq"::text, s."is_default"::text, s."default_flag"::text,'
    ' s."backfilled_by"::text, s."created_at"::text, s."updated_at"::text,'
    ' s."archived_at"::text, s."forked_from"::text, s."forked_at_seq"::text] INTO loaded'
    ' FROM cortex_sessions_session s WHERE s."id" = $1 AND CASE WHEN (s."scope" >= $2 AND'
    ' s."scope" < $3 AND (s."scope" = $4 OR s."scope" >= $5)) THEN TRUE END AND'
    ' s."agent_id" = COALESCE($6, s."agent_id");\n'
    "  RETURN loaded;\n"
    "END\n"
    "$function$"
)

DROP_GET = "DROP FUNCTION IF EXISTS cortex_sessions_get_v1(uuid, text, text, text, text, text)"

CREATE_RESOLVE = (
    "CREATE OR REPLACE FUNCTION cortex_sessions_resolve_v1(text, text) RETURNS text[]"
    " LANGUAGE plpgsql STABLE AS $function$\n"
    "#variable_conflict use_column\n"
    "DECLARE\n"
    "  loaded text[];\n"
    "BEGIN\n"
    '  SELECT ARRAY[s."id"::text, s."agent_id"::text, s."scope"::text, s."title"::text,'
    ' s."metadata"::text, s."cwd"::text, s."message_count"::text, s."last_message"::text,'
    ' s."last_seq"::text, s."is_default"::text, s."default_flag"::text,'
    ' s."backfilled_by"::text, s."created_at"::text, s."updated_at"::text,'
    ' s."archived_at"::text, s."forked_from"::text, s."forked_at_seq"::text] INTO loaded'
    ' FROM cortex_sessions_session s WHERE s."agent_id" = $1 AND s."scope" = $2 AND'
    ' s."is_default";\n'
    "  RETURN loaded;\n"
    "END\n"
    "$function$"
)

DROP_RESOLVE = "DROP FUNCTION IF EXISTS cortex_sessions_resolve_v1(text, text)"


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY runs outside a transaction

    replaces = [
        ("cortex_sessions", "0012_message_search"),
        ("cortex_sessions", "0013_append_one_function"),
        ("cortex_sessions", "0014_append_one_narrow_row"),
        ("cortex_sessions", "0015_append_one_monotonic_updated_at"),
        ("cortex_sessions", "0016_append_one_returns_an_array"),
        ("cortex_sessions", "0017_get_and_resolve_functions"),
        ("cortex_sessions", "0018_drop_pre_release_append_functions"),
    ]

    dependencies = [
        ("cortex_sessions", "0001_squashed_0011_sessions"),
    ]

    operations = [
        MessageSearchSchema(),
        OnVendors(
            vendors=["postgresql"],
            operations=[
                migrations.RunSQL(CREATE_APPEND_ONE, DROP_APPEND_ONE, elidable=False),
                migrations.RunSQL(CREATE_GET, DROP_GET, elidable=False),
                migrations.RunSQL(CREATE_RESOLVE, DROP_RESOLVE, elidable=False),
            ],
        ),
    ]
