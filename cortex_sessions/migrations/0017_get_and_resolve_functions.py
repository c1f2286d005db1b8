"""On PostgreSQL, the functions ``cortex_sessions_get_v1`` and ``cortex_sessions_resolve_v1``
(docs/design.md §14.1): the session reads of the hot path, the session ``id`` within a scope
(and of one agent) and the default session of an agent at a scope, each one statement whose
plan the server keeps for the rest of its session, returning every column of the session as
one ``text[]`` value (``NULL``: none). Sent unprepared, the bare statements were planned on
every call, against each of the session's indexes and the scope column's statistics: more
than half of a read's server time (docs/performance.md). Other databases read through the
ORM, so on them this migration does nothing.

Deploying: code of this version reads sessions through these functions, so run this migration
before that code serves (code of a release before it on a migrated database reads as before;
code of this version on a database not migrated yet gets an error from the server: the
function does not exist). Creating a function takes no lock on the tables.

The SQL below is a frozen copy of ``_pg.function_sql``; ``tests/test_hot_paths.py`` checks that
they agree. Backward, the functions are dropped.
"""

from __future__ import annotations

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.operations.base import Operation
from django.db.migrations.state import ProjectState

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


class GetAndResolveFunctions(Operation):
    """Create (backward: drop) ``cortex_sessions_get_v1`` and ``cortex_sessions_resolve_v1``,
    on PostgreSQL only."""

    reversible = True
    reduces_to_sql = True

    def state_forwards(self, app_label: str, state: ProjectState) -> None:
        """Nothing: a function is not part of the models."""

    def database_forwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(CREATE_GET)
            schema_editor.execute(CREATE_RESOLVE)

    def database_backwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(DROP_RESOLVE)
            schema_editor.execute(DROP_GET)

    def describe(self) -> str:
        return "On PostgreSQL: functions cortex_sessions_get_v1 and cortex_sessions_resolve_v1"


class Migration(migrations.Migration):
    dependencies = [
        ("cortex_sessions", "0016_append_one_returns_an_array"),
    ]

    operations = [GetAndResolveFunctions()]
