"""The newest page of a session's messages as a PL/pgSQL function (docs/design.md §7.1, §14): on
PostgreSQL ``cortex_sessions_newest_v1`` returns the newest messages of a live session within a
scope, newest first (a row of NULLs for a session without messages, no row for a session that is
missing, foreign or expired), the statement ``services.list_messages`` sent inline for a page
without ``after_seq`` or ``before_seq``. The server plans a function's statement once per
connection and keeps the plan, whatever the pooler, where the inline statement was planned on every
call (about twice the time it took to run, docs/performance.md). Nothing existing is locked or
rewritten; other databases are not touched.

Deploying: code of this version calls the function for the newest page, so run this migration
before it serves (code of this version on a database without it gets "function does not exist" on
PostgreSQL for that page); code of the previous release ignores the function. The SQL below is a
frozen copy of ``_pg.function_sql``; ``tests/test_pg_newest_page.py`` checks that they agree.
Backward, the function is dropped.
"""

from __future__ import annotations

from django.db import migrations

from cortex_sessions.migrations._operations import OnVendors

CREATE_NEWEST = 'CREATE OR REPLACE FUNCTION cortex_sessions_newest_v1(uuid, bigint, uuid, text, text, text, text) RETURNS TABLE ("id" bigint, "agent_id" text, "scope" text, "seq" bigint, "role" text, "source" text, "content" jsonb, "metadata" jsonb, "created_at" timestamptz, "usage" jsonb, "token_count" integer, "compacts_through_seq" integer) LANGUAGE plpgsql STABLE AS $function$\n#variable_conflict use_column\nBEGIN\n  RETURN QUERY SELECT p."id"::bigint, p."agent_id"::text, p."scope"::text, p."seq"::bigint, p."role"::text, p."source"::text, p."content"::jsonb, p."metadata"::jsonb, p."created_at"::timestamptz, p."usage"::jsonb, p."token_count"::integer, p."compacts_through_seq"::integer FROM cortex_sessions_session s LEFT JOIN LATERAL (SELECT m."id", m."session_id", m."agent_id", m."scope", m."seq", m."role", m."source", m."content", m."metadata", m."created_at", m."usage", m."token_count", m."compacts_through_seq" FROM cortex_sessions_message m WHERE m."session_id" = $1 ORDER BY m."seq" DESC LIMIT $2) p ON TRUE WHERE s."id" = $3 AND CASE WHEN (s."scope" >= $4 AND s."scope" < $5 AND (s."scope" = $6 OR s."scope" >= $7)) AND (s."expires_at" IS NULL OR s."expires_at" > statement_timestamp()) THEN TRUE END;\nEND\n$function$'

DROP_NEWEST = (
    "DROP FUNCTION IF EXISTS cortex_sessions_newest_v1(uuid, bigint, uuid, text, text, text, text)"
)


class Migration(migrations.Migration):
    dependencies = [
        ("cortex_sessions", "0022_append_many_function"),
    ]

    operations = [
        OnVendors(
            vendors=["postgresql"],
            operations=[
                migrations.RunSQL(CREATE_NEWEST, DROP_NEWEST, elidable=False),
            ],
        ),
    ]
