"""Retention and legal hold (docs/design.md §18.1): ``Session.expires_at`` (host-owned, nullable)
and ``Session.legal_hold`` (default false), the index the expiry sweep walks, and on PostgreSQL the
hot-path functions in versions that carry the two columns and hide an expired session:
``cortex_sessions_append_one_v6`` (an append to an expired session writes nothing),
``cortex_sessions_get_v3`` and ``cortex_sessions_resolve_v3`` (an expired session is not returned).
The versions they replace (``_append_one_v5``, ``_get_v2`` and ``_resolve_v2`` of
``0019_context_window``) are dropped: they select a fixed list of columns, which no longer matches
the model's.

Existing sessions get ``expires_at`` null (never expire) and ``legal_hold`` false. Adding a
nullable column and a column with a constant default is a catalogue change on PostgreSQL 11+ and
an instant ``ADD COLUMN`` on MariaDB 10.3+; building the expiry index reads the table once (on
PostgreSQL and SQLite it holds only the sessions with an ``expires_at``). The scope, archived and
agent indexes are built again ending with ``expires_at``, which every read now filters on, so a
count stays an index-only scan: writes to the session table wait while each is built (about as
long as building it took at install; plan a window for a table of millions of sessions).

Deploying: code of this version calls the new functions, so run this migration before it serves
(code of the previous release on a migrated database gets "function does not exist" on
PostgreSQL; nothing is written by a call the server refuses). The SQL below is a frozen copy of
``_pg.function_sql``; ``tests/test_hot_paths.py`` checks that they agree. Backward, the new
functions are dropped and the previous ones created again from ``0019_context_window``.
"""

from __future__ import annotations

import importlib

from django.db import migrations, models

import cortex_sessions.constraints
from cortex_sessions.migrations._operations import OnVendors

CREATE_APPEND_ONE = 'CREATE OR REPLACE FUNCTION cortex_sessions_append_one_v6(bigint, bigint, numeric, bigint, timestamptz, text, uuid, text, text, text, text, text, text, text, text, timestamptz, text, integer) RETURNS text[] LANGUAGE plpgsql AS $function$\n#variable_conflict use_column\nDECLARE\n  appended text[];\nBEGIN\n  WITH s AS ( UPDATE cortex_sessions_session s SET "last_seq" = s."last_seq" + 1, "message_count" = s."message_count" + 1, "input_tokens" = s."input_tokens" + $1, "output_tokens" = s."output_tokens" + $2, "cost" = s."cost" + $3, "context_tokens" = s."context_tokens" + $4, "updated_at" = GREATEST(s."updated_at", $5), "last_message" = COALESCE($6, s."last_message") WHERE s."id" = $7 AND s."archived_at" IS NULL AND CASE WHEN (s."scope" >= $8 AND s."scope" < $9 AND (s."scope" = $10 OR s."scope" >= $11)) AND (s."expires_at" IS NULL OR s."expires_at" > statement_timestamp()) THEN TRUE END RETURNING s."id", s."agent_id", s."scope", s."title", s."metadata", s."cwd", s."message_count", s."last_message", s."last_seq", s."is_default", s."default_flag", s."backfilled_by", s."created_at", s."updated_at", s."archived_at", s."forked_from", s."forked_at_seq", s."input_tokens", s."output_tokens", s."cost", s."context_tokens", s."expires_at", s."legal_hold"), m AS ( INSERT INTO cortex_sessions_message ("session_id", "agent_id", "scope", "seq", "role", "source", "content", "metadata", "created_at", "usage", "token_count") SELECT s."id", s."agent_id", s."scope", s."last_seq", $12, $13, $14::jsonb, $15::jsonb, $16, $17::jsonb, $18 FROM s RETURNING "id", "seq") SELECT ARRAY[s."agent_id"::text, s."scope"::text, s."title"::text, s."metadata"::text, s."cwd"::text, s."message_count"::text, s."last_message"::text, s."last_seq"::text, s."is_default"::text, s."default_flag"::text, s."backfilled_by"::text, s."created_at"::text, s."updated_at"::text, s."forked_from"::text, s."forked_at_seq"::text, s."input_tokens"::text, s."output_tokens"::text, s."cost"::text, s."context_tokens"::text, s."expires_at"::text, s."legal_hold"::text, m."id"::text, m."seq"::text] INTO appended FROM s, m;\n  RETURN appended;\nEND\n$function$'

DROP_APPEND_ONE = 'DROP FUNCTION IF EXISTS cortex_sessions_append_one_v6(bigint, bigint, numeric, bigint, timestamptz, text, uuid, text, text, text, text, text, text, text, text, timestamptz, text, integer)'

CREATE_GET = 'CREATE OR REPLACE FUNCTION cortex_sessions_get_v3(uuid, text, text, text, text, text) RETURNS text[] LANGUAGE plpgsql STABLE AS $function$\n#variable_conflict use_column\nDECLARE\n  loaded text[];\nBEGIN\n  SELECT ARRAY[s."id"::text, s."agent_id"::text, s."scope"::text, s."title"::text, s."metadata"::text, s."cwd"::text, s."message_count"::text, s."last_message"::text, s."last_seq"::text, s."is_default"::text, s."default_flag"::text, s."backfilled_by"::text, s."created_at"::text, s."updated_at"::text, s."archived_at"::text, s."forked_from"::text, s."forked_at_seq"::text, s."input_tokens"::text, s."output_tokens"::text, s."cost"::text, s."context_tokens"::text, s."expires_at"::text, s."legal_hold"::text] INTO loaded FROM cortex_sessions_session s WHERE s."id" = $1 AND CASE WHEN (s."scope" >= $2 AND s."scope" < $3 AND (s."scope" = $4 OR s."scope" >= $5)) AND (s."expires_at" IS NULL OR s."expires_at" > statement_timestamp()) THEN TRUE END AND s."agent_id" = COALESCE($6, s."agent_id");\n  RETURN loaded;\nEND\n$function$'

DROP_GET = 'DROP FUNCTION IF EXISTS cortex_sessions_get_v3(uuid, text, text, text, text, text)'

CREATE_RESOLVE = 'CREATE OR REPLACE FUNCTION cortex_sessions_resolve_v3(text, text) RETURNS text[] LANGUAGE plpgsql STABLE AS $function$\n#variable_conflict use_column\nDECLARE\n  loaded text[];\nBEGIN\n  SELECT ARRAY[s."id"::text, s."agent_id"::text, s."scope"::text, s."title"::text, s."metadata"::text, s."cwd"::text, s."message_count"::text, s."last_message"::text, s."last_seq"::text, s."is_default"::text, s."default_flag"::text, s."backfilled_by"::text, s."created_at"::text, s."updated_at"::text, s."archived_at"::text, s."forked_from"::text, s."forked_at_seq"::text, s."input_tokens"::text, s."output_tokens"::text, s."cost"::text, s."context_tokens"::text, s."expires_at"::text, s."legal_hold"::text] INTO loaded FROM cortex_sessions_session s WHERE s."agent_id" = $1 AND s."scope" = $2 AND s."is_default" AND (s."expires_at" IS NULL OR s."expires_at" > statement_timestamp());\n  RETURN loaded;\nEND\n$function$'

DROP_RESOLVE = 'DROP FUNCTION IF EXISTS cortex_sessions_resolve_v3(text, text)'


def _previous() -> tuple[list[str], list[str]]:
    """``(create, drop)`` statements of the functions this migration replaces."""
    previous = importlib.import_module("cortex_sessions.migrations.0019_context_window")
    return (
        [previous.CREATE_APPEND_ONE, previous.CREATE_GET, previous.CREATE_RESOLVE],
        [previous.DROP_APPEND_ONE, previous.DROP_GET, previous.DROP_RESOLVE],
    )


def _functions() -> migrations.RunSQL:
    """Create the new functions and drop the previous ones (backward: the reverse)."""
    create_previous, drop_previous = _previous()
    return migrations.RunSQL(
        [CREATE_APPEND_ONE, CREATE_GET, CREATE_RESOLVE, *drop_previous],
        [DROP_APPEND_ONE, DROP_GET, DROP_RESOLVE, *create_previous],
        elidable=False,
    )


class Migration(migrations.Migration):
    dependencies = [
        ("cortex_sessions", "0019_context_window"),
    ]

    operations = [
        migrations.AddField(
            model_name="session",
            name="expires_at",
            field=models.DateTimeField(blank=True, null=True, verbose_name="expires at"),
        ),
        migrations.AddField(
            model_name="session",
            name="legal_hold",
            field=models.BooleanField(db_default=False, default=False, verbose_name="legal hold"),
        ),
        # The scope and agent indexes end with expires_at, which every read now filters on,
        # so counts stay index-only scans (docs/performance.md).
        migrations.RemoveIndex(model_name="session", name="cortex_session_scope_idx"),
        migrations.AddIndex(
            model_name="session",
            index=cortex_sessions.constraints.PartialIndex(
                fallback_fields=["scope", "archived_at", "-updated_at", "-id", "expires_at"],
                fields=["scope", "-updated_at", "-id", "expires_at"],
                name="cortex_session_scope_idx",
                where=models.Q(("archived_at__isnull", True)),
            ),
        ),
        migrations.RemoveIndex(model_name="session", name="cortex_session_archived_idx"),
        migrations.AddIndex(
            model_name="session",
            index=cortex_sessions.constraints.PartialIndex(
                fallback_fields=None,
                fields=["scope", "-updated_at", "-id", "expires_at"],
                name="cortex_session_archived_idx",
                where=models.Q(("archived_at__isnull", False)),
            ),
        ),
        migrations.RemoveIndex(model_name="session", name="cortex_session_agent_idx"),
        migrations.AddIndex(
            model_name="session",
            index=models.Index(
                fields=["agent_id", "scope", "-updated_at", "-id", "expires_at"],
                name="cortex_session_agent_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="session",
            index=cortex_sessions.constraints.PartialIndex(
                fallback_fields=["expires_at", "id"],
                fields=["expires_at", "id"],
                name="cortex_session_expires_idx",
                where=models.Q(("expires_at__isnull", False)),
            ),
        ),
        OnVendors(vendors=["postgresql"], operations=[_functions()]),
    ]
