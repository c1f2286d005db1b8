"""On PostgreSQL, the function ``cortex_sessions_append_one_v4`` (docs/design.md §14.1): the
append of ``0015_append_one_monotonic_updated_at``'s ``cortex_sessions_append_one_v3`` (same
arguments, same writes, same narrow row) returned as one ``text[]`` value, the timestamps
among its elements, instead of a row of three columns: the code calls it in the select list
(``SELECT f(…)``) rather than as a table function in ``FROM`` (``SELECT * FROM f(…)``), which
saves the server a function scan, the description of the result row and two tuple stores on
every call (docs/performance.md). ``NULL`` means nothing was written, as no row did. Other
databases append through the ORM, so on them this migration does nothing.

Deploying: as with 0014 and 0015, the function has a new name and the earlier ones stay, so
both orders are safe: code of this version on a database not yet migrated is refused at parse
time, before anything is written; code of an earlier version on a migrated database keeps
calling its own function. A later migration drops the earlier functions once no release calls
them.

Creating a function takes no lock on the tables. The SQL below is a frozen copy of
``_pg.append_one_function_sql``; ``tests/test_hot_paths.py`` checks that they agree. Backward,
the function is dropped.
"""

from __future__ import annotations

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.operations.base import Operation
from django.db.migrations.state import ProjectState

CREATE = (
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

DROP = (
    "DROP FUNCTION IF EXISTS cortex_sessions_append_one_v4(timestamptz, text, uuid, text, text,"
    " text, text, text, text, text, text, timestamptz)"
)


class AppendOneReturnsAnArray(Operation):
    """Create (backward: drop) ``cortex_sessions_append_one_v4``, on PostgreSQL only."""

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
        return "On PostgreSQL: function cortex_sessions_append_one_v4 (one text[] value)"


class Migration(migrations.Migration):
    dependencies = [
        ("cortex_sessions", "0015_append_one_monotonic_updated_at"),
    ]

    operations = [AppendOneReturnsAnArray()]
