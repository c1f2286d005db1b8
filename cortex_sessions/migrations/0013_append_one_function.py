"""On PostgreSQL, the function ``cortex_sessions_append_one`` that appends one message in one
statement (docs/design.md §14.1); other databases append through the ORM, so on them this
migration does nothing.

The function runs the append statement of ``cortex_sessions/services/_pg.py``: PL/pgSQL plans it
once per server session and keeps the plan, where the same statement sent unprepared is parsed
and planned on every call (docs/performance.md). The SQL below is a frozen copy of
``_pg.append_one_function_sql``, as migrations are; ``tests/test_hot_paths.py`` checks that they
agree. A later change to the session's columns or to the statement replaces the function in a
new migration.

Creating a function takes no lock on the tables. Backward, the function is dropped: the code
of this version calls it for every one-message append on PostgreSQL, so migrate back only
together with the code you go back to, as with any schema change.
"""

from __future__ import annotations

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.operations.base import Operation
from django.db.migrations.state import ProjectState

CREATE = (
    "CREATE OR REPLACE FUNCTION cortex_sessions_append_one(timestamptz, text, uuid, text,"
    ' text, text, text, text, text, text, text, timestamptz) RETURNS TABLE ("id" uuid, '
    '"agent_id" varchar(255), "scope" varchar(1024), "title" varchar(500), "metadata" '
    'jsonb, "cwd" text, "message_count" bigint, "last_message" text, "last_seq" bigint, '
    '"is_default" boolean, "default_flag" boolean, "backfilled_by" varchar(100), '
    '"created_at" timestamp with time zone, "updated_at" timestamp with time zone, '
    '"archived_at" timestamp with time zone, "forked_from" uuid, "forked_at_seq" bigint, '
    '"message_id" bigint, "message_seq" bigint) LANGUAGE plpgsql AS $function$\n'
    "#variable_conflict use_column\n"
    "BEGIN\n"
    '  RETURN QUERY WITH s AS ( UPDATE cortex_sessions_session s SET "last_seq" = '
    's."last_seq" + 1, "message_count" = s."message_count" + 1, "updated_at" = $1, '
    '"last_message" = COALESCE($2, s."last_message") WHERE s."id" = $3 AND '
    's."archived_at" IS NULL AND (s."scope" >= $4 AND s."scope" < $5 AND (s."scope" = $6 '
    'OR s."scope" >= $7)) RETURNING s."id", s."agent_id", s."scope", s."title", '
    's."metadata", s."cwd", s."message_count", s."last_message", s."last_seq", '
    's."is_default", s."default_flag", s."backfilled_by", s."created_at", s."updated_at",'
    ' s."archived_at", s."forked_from", s."forked_at_seq"), m AS ( INSERT INTO '
    'cortex_sessions_message ("session_id", "agent_id", "scope", "seq", "role", "source",'
    ' "content", "metadata", "created_at") SELECT s."id", s."agent_id", s."scope", '
    's."last_seq", $8, $9, $10::jsonb, $11::jsonb, $12 FROM s RETURNING "id", "seq") '
    'SELECT s."id", s."agent_id", s."scope", s."title", s."metadata", s."cwd", '
    's."message_count", s."last_message", s."last_seq", s."is_default", s."default_flag",'
    ' s."backfilled_by", s."created_at", s."updated_at", s."archived_at", '
    's."forked_from", s."forked_at_seq", m."id", m."seq" FROM s, m;\n'
    "END\n"
    "$function$"
)

DROP = (
    "DROP FUNCTION IF EXISTS cortex_sessions_append_one(timestamptz, text, uuid, text, "
    "text, text, text, text, text, text, text, timestamptz)"
)


class AppendOneFunction(Operation):
    """Create (backward: drop) ``cortex_sessions_append_one``, on PostgreSQL only."""

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
            schema_editor.execute(CREATE)

    def database_backwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(DROP)

    def describe(self) -> str:
        return "On PostgreSQL: function cortex_sessions_append_one"


class Migration(migrations.Migration):
    dependencies = [
        ("cortex_sessions", "0012_message_search"),
    ]

    operations = [AppendOneFunction()]
