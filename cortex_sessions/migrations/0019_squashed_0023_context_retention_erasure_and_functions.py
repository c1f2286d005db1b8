"""The context window's, retention's and erasure's schema and the hot-path functions of this
release, each created once in its final form (docs/design.md §4, §14.1, §16, §18).

Made with ``manage.py squashmigrations cortex_sessions 0019 0023`` and edited by hand, as
Django's documentation allows. It replaces ``0019_context_window`` to
``0023_newest_page_function``: of each PL/pgSQL function only the version the code calls is
created (``cortex_sessions_append_one_v6``, ``_get_v3`` and ``_resolve_v3`` of ``0020``,
``cortex_sessions_append_many_v1`` of ``0022``, ``cortex_sessions_newest_v1`` of ``0023``), none of
the ``_append_one_v5``, ``_get_v2`` and ``_resolve_v2`` that ``0019`` created and ``0020``
dropped. A database that applied some of those originals but not all goes on with the originals;
the originals are deleted in the release after next (docs/design.md §4).

What each database gets, as through the originals:
- a message's ``usage``, ``token_count`` and ``compacts_through_seq``, a session's
  ``input_tokens``, ``output_tokens``, ``cost`` and ``context_tokens`` (``0019``), its
  ``expires_at`` and ``legal_hold`` (``0020``), all with constant database defaults (a change of
  the catalogue on PostgreSQL 11+ and MariaDB 10.3+, no table rewrite);
- the scope, archived and agent indexes built again ending with ``expires_at`` and the expiry
  sweep's index (``0020``): writes to the session table wait while each is built;
- the ``Erasure`` table and its permission (``0021``);
- on PostgreSQL only: the functions of 1.0.0 (``cortex_sessions_append_one_v4``, ``_get_v1``,
  ``_resolve_v1`` of ``0012_squashed_0018_search_and_functions``), which a database at 1.0.0 has
  and no code of this version calls, dropped; the five functions above created. The SQL below is
  a frozen copy of ``_pg.function_sql``; ``tests/test_squashed_migrations.py`` checks that they
  agree. A later change to a function adds it under a new name in a new migration
  (docs/design.md §14.1);
- the data step of ``0019`` (``_operations.fill_token_counts``): every existing message its
  ``token_count``, every session its ``context_tokens``, in bounded batches; on a new database it
  finds no rows. It runs last, after every change of the schema.

Deploying: code of this version calls the new functions, so run this migration before it serves
(code of 1.0.0 on a migrated database gets "function does not exist" on PostgreSQL; nothing is
written by a call the server refuses). Backward, the data step does nothing, the five functions
are dropped and 1.0.0's created again from the frozen SQL of ``0012_squashed``, the table, the
indexes and the columns go back to 1.0.0's.
"""

from __future__ import annotations

import importlib
from decimal import Decimal

import django.utils.timezone
import uuid6
from django.db import migrations, models

import cortex_sessions.constraints
import cortex_sessions.fields
from cortex_sessions.migrations._operations import OnVendors, fill_token_counts

CREATE_APPEND_ONE = 'CREATE OR REPLACE FUNCTION cortex_sessions_append_one_v6(bigint, bigint, numeric, bigint, timestamptz, text, uuid, text, text, text, text, text, text, text, text, timestamptz, text, integer) RETURNS text[] LANGUAGE plpgsql AS $function$\n#variable_conflict use_column\nDECLARE\n  appended text[];\nBEGIN\n  WITH s AS ( UPDATE cortex_sessions_session s SET "last_seq" = s."last_seq" + 1, "message_count" = s."message_count" + 1, "input_tokens" = s."input_tokens" + $1, "output_tokens" = s."output_tokens" + $2, "cost" = s."cost" + $3, "context_tokens" = s."context_tokens" + $4, "updated_at" = GREATEST(s."updated_at", $5), "last_message" = COALESCE($6, s."last_message") WHERE s."id" = $7 AND s."archived_at" IS NULL AND CASE WHEN (s."scope" >= $8 AND s."scope" < $9 AND (s."scope" = $10 OR s."scope" >= $11)) AND (s."expires_at" IS NULL OR s."expires_at" > statement_timestamp()) THEN TRUE END RETURNING s."id", s."agent_id", s."scope", s."title", s."metadata", s."cwd", s."message_count", s."last_message", s."last_seq", s."is_default", s."default_flag", s."backfilled_by", s."created_at", s."updated_at", s."archived_at", s."forked_from", s."forked_at_seq", s."input_tokens", s."output_tokens", s."cost", s."context_tokens", s."expires_at", s."legal_hold"), m AS ( INSERT INTO cortex_sessions_message ("session_id", "agent_id", "scope", "seq", "role", "source", "content", "metadata", "created_at", "usage", "token_count") SELECT s."id", s."agent_id", s."scope", s."last_seq", $12, $13, $14::jsonb, $15::jsonb, $16, $17::jsonb, $18 FROM s RETURNING "id", "seq") SELECT ARRAY[s."agent_id"::text, s."scope"::text, s."title"::text, s."metadata"::text, s."cwd"::text, s."message_count"::text, s."last_message"::text, s."last_seq"::text, s."is_default"::text, s."default_flag"::text, s."backfilled_by"::text, s."created_at"::text, s."updated_at"::text, s."forked_from"::text, s."forked_at_seq"::text, s."input_tokens"::text, s."output_tokens"::text, s."cost"::text, s."context_tokens"::text, s."expires_at"::text, s."legal_hold"::text, m."id"::text, m."seq"::text] INTO appended FROM s, m;\n  RETURN appended;\nEND\n$function$'
DROP_APPEND_ONE = 'DROP FUNCTION IF EXISTS cortex_sessions_append_one_v6(bigint, bigint, numeric, bigint, timestamptz, text, uuid, text, text, text, text, text, text, text, text, timestamptz, text, integer)'

CREATE_GET = 'CREATE OR REPLACE FUNCTION cortex_sessions_get_v3(uuid, text, text, text, text, text) RETURNS text[] LANGUAGE plpgsql STABLE AS $function$\n#variable_conflict use_column\nDECLARE\n  loaded text[];\nBEGIN\n  SELECT ARRAY[s."id"::text, s."agent_id"::text, s."scope"::text, s."title"::text, s."metadata"::text, s."cwd"::text, s."message_count"::text, s."last_message"::text, s."last_seq"::text, s."is_default"::text, s."default_flag"::text, s."backfilled_by"::text, s."created_at"::text, s."updated_at"::text, s."archived_at"::text, s."forked_from"::text, s."forked_at_seq"::text, s."input_tokens"::text, s."output_tokens"::text, s."cost"::text, s."context_tokens"::text, s."expires_at"::text, s."legal_hold"::text] INTO loaded FROM cortex_sessions_session s WHERE s."id" = $1 AND CASE WHEN (s."scope" >= $2 AND s."scope" < $3 AND (s."scope" = $4 OR s."scope" >= $5)) AND (s."expires_at" IS NULL OR s."expires_at" > statement_timestamp()) THEN TRUE END AND s."agent_id" = COALESCE($6, s."agent_id");\n  RETURN loaded;\nEND\n$function$'
DROP_GET = 'DROP FUNCTION IF EXISTS cortex_sessions_get_v3(uuid, text, text, text, text, text)'

CREATE_RESOLVE = 'CREATE OR REPLACE FUNCTION cortex_sessions_resolve_v3(text, text) RETURNS text[] LANGUAGE plpgsql STABLE AS $function$\n#variable_conflict use_column\nDECLARE\n  loaded text[];\nBEGIN\n  SELECT ARRAY[s."id"::text, s."agent_id"::text, s."scope"::text, s."title"::text, s."metadata"::text, s."cwd"::text, s."message_count"::text, s."last_message"::text, s."last_seq"::text, s."is_default"::text, s."default_flag"::text, s."backfilled_by"::text, s."created_at"::text, s."updated_at"::text, s."archived_at"::text, s."forked_from"::text, s."forked_at_seq"::text, s."input_tokens"::text, s."output_tokens"::text, s."cost"::text, s."context_tokens"::text, s."expires_at"::text, s."legal_hold"::text] INTO loaded FROM cortex_sessions_session s WHERE s."agent_id" = $1 AND s."scope" = $2 AND s."is_default" AND (s."expires_at" IS NULL OR s."expires_at" > statement_timestamp());\n  RETURN loaded;\nEND\n$function$'
DROP_RESOLVE = 'DROP FUNCTION IF EXISTS cortex_sessions_resolve_v3(text, text)'

CREATE_APPEND_MANY = 'CREATE OR REPLACE FUNCTION cortex_sessions_append_many_v1(bigint, bigint, bigint, bigint, numeric, bigint, timestamptz, text, uuid, text, text, text, text, bigint, text) RETURNS text[] LANGUAGE plpgsql AS $function$\n#variable_conflict use_column\nDECLARE\n  appended text[];\nBEGIN\n  WITH s AS ( UPDATE cortex_sessions_session s SET "last_seq" = s."last_seq" + $1, "message_count" = s."message_count" + $2, "input_tokens" = s."input_tokens" + $3, "output_tokens" = s."output_tokens" + $4, "cost" = s."cost" + $5, "context_tokens" = s."context_tokens" + $6, "updated_at" = GREATEST(s."updated_at", $7), "last_message" = COALESCE($8, s."last_message") WHERE s."id" = $9 AND s."archived_at" IS NULL AND CASE WHEN (s."scope" >= $10 AND s."scope" < $11 AND (s."scope" = $12 OR s."scope" >= $13)) AND (s."expires_at" IS NULL OR s."expires_at" > statement_timestamp()) THEN TRUE END RETURNING s."id", s."agent_id", s."scope", s."title", s."metadata", s."cwd", s."message_count", s."last_message", s."last_seq", s."is_default", s."default_flag", s."backfilled_by", s."created_at", s."updated_at", s."archived_at", s."forked_from", s."forked_at_seq", s."input_tokens", s."output_tokens", s."cost", s."context_tokens", s."expires_at", s."legal_hold"), m AS ( INSERT INTO cortex_sessions_message ("session_id", "agent_id", "scope", "seq", "role", "source", "content", "metadata", "created_at", "usage", "token_count") SELECT s."id", s."agent_id", s."scope", s."last_seq" - $14 + v.ord, v.e ->> 0, v.e ->> 1, (v.e -> 2)::jsonb, (v.e -> 3)::jsonb, (v.e ->> 4)::timestamptz, (v.e ->> 5)::jsonb, (v.e ->> 6)::integer FROM s, json_array_elements($15::json) WITH ORDINALITY AS v(e, ord) RETURNING "id", "seq") SELECT (SELECT ARRAY[s."agent_id"::text, s."scope"::text, s."title"::text, s."metadata"::text, s."cwd"::text, s."message_count"::text, s."last_message"::text, s."last_seq"::text, s."is_default"::text, s."default_flag"::text, s."backfilled_by"::text, s."created_at"::text, s."updated_at"::text, s."forked_from"::text, s."forked_at_seq"::text, s."input_tokens"::text, s."output_tokens"::text, s."cost"::text, s."context_tokens"::text, s."expires_at"::text, s."legal_hold"::text] FROM s) || array_agg(m."id"::text ORDER BY m."seq") INTO appended FROM m;\n  RETURN appended;\nEND\n$function$'
DROP_APPEND_MANY = 'DROP FUNCTION IF EXISTS cortex_sessions_append_many_v1(bigint, bigint, bigint, bigint, numeric, bigint, timestamptz, text, uuid, text, text, text, text, bigint, text)'

CREATE_NEWEST = 'CREATE OR REPLACE FUNCTION cortex_sessions_newest_v1(uuid, bigint, uuid, text, text, text, text) RETURNS TABLE ("id" bigint, "agent_id" text, "scope" text, "seq" bigint, "role" text, "source" text, "content" jsonb, "metadata" jsonb, "created_at" timestamptz, "usage" jsonb, "token_count" integer, "compacts_through_seq" integer) LANGUAGE plpgsql STABLE AS $function$\n#variable_conflict use_column\nBEGIN\n  RETURN QUERY SELECT p."id"::bigint, p."agent_id"::text, p."scope"::text, p."seq"::bigint, p."role"::text, p."source"::text, p."content"::jsonb, p."metadata"::jsonb, p."created_at"::timestamptz, p."usage"::jsonb, p."token_count"::integer, p."compacts_through_seq"::integer FROM cortex_sessions_session s LEFT JOIN LATERAL (SELECT m."id", m."session_id", m."agent_id", m."scope", m."seq", m."role", m."source", m."content", m."metadata", m."created_at", m."usage", m."token_count", m."compacts_through_seq" FROM cortex_sessions_message m WHERE m."session_id" = $1 ORDER BY m."seq" DESC LIMIT $2) p ON TRUE WHERE s."id" = $3 AND CASE WHEN (s."scope" >= $4 AND s."scope" < $5 AND (s."scope" = $6 OR s."scope" >= $7)) AND (s."expires_at" IS NULL OR s."expires_at" > statement_timestamp()) THEN TRUE END;\nEND\n$function$'
DROP_NEWEST = 'DROP FUNCTION IF EXISTS cortex_sessions_newest_v1(uuid, bigint, uuid, text, text, text, text)'

#: The functions of this release: ``(create, drop)`` of each, in the order they are created.
FUNCTIONS = (
    (CREATE_APPEND_ONE, DROP_APPEND_ONE),
    (CREATE_GET, DROP_GET),
    (CREATE_RESOLVE, DROP_RESOLVE),
    (CREATE_APPEND_MANY, DROP_APPEND_MANY),
    (CREATE_NEWEST, DROP_NEWEST),
)


def _released() -> migrations.RunSQL:
    """Drop 1.0.0's functions (backward: create them again from the frozen SQL of the squash
    that created them, which stays)."""
    released = importlib.import_module(
        "cortex_sessions.migrations.0012_squashed_0018_search_and_functions"
    )
    return migrations.RunSQL(
        [released.DROP_APPEND_ONE, released.DROP_GET, released.DROP_RESOLVE],
        [released.CREATE_APPEND_ONE, released.CREATE_GET, released.CREATE_RESOLVE],
        elidable=False,
    )


class Migration(migrations.Migration):
    replaces = [
        ("cortex_sessions", "0019_context_window"),
        ("cortex_sessions", "0020_retention"),
        ("cortex_sessions", "0021_erasures"),
        ("cortex_sessions", "0022_append_many_function"),
        ("cortex_sessions", "0023_newest_page_function"),
    ]

    dependencies = [
        ("cortex_sessions", "0012_squashed_0018_search_and_functions"),
    ]

    operations = [
        # 0019: the context window's columns.
        migrations.AddField(
            model_name="message",
            name="compacts_through_seq",
            field=models.PositiveIntegerField(
                blank=True, editable=False, null=True, verbose_name="compacts through seq"
            ),
        ),
        migrations.AddField(
            model_name="message",
            name="token_count",
            field=models.PositiveIntegerField(
                db_default=0, default=0, editable=False, verbose_name="token count"
            ),
        ),
        migrations.AddField(
            model_name="message",
            name="usage",
            field=models.JSONField(
                blank=True, default=None, editable=False, null=True, verbose_name="usage"
            ),
        ),
        migrations.AddField(
            model_name="session",
            name="context_tokens",
            field=models.PositiveBigIntegerField(
                db_default=0, default=0, editable=False, verbose_name="context tokens"
            ),
        ),
        migrations.AddField(
            model_name="session",
            name="cost",
            field=models.DecimalField(
                db_default=Decimal("0"),
                decimal_places=6,
                default=Decimal("0"),
                editable=False,
                max_digits=20,
                verbose_name="cost",
            ),
        ),
        migrations.AddField(
            model_name="session",
            name="input_tokens",
            field=models.PositiveBigIntegerField(
                db_default=0, default=0, editable=False, verbose_name="input tokens"
            ),
        ),
        migrations.AddField(
            model_name="session",
            name="output_tokens",
            field=models.PositiveBigIntegerField(
                db_default=0, default=0, editable=False, verbose_name="output tokens"
            ),
        ),
        # 0020: retention's columns and indexes (1.0.0's scope, archived and agent indexes
        # rebuilt ending with expires_at).
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
        # 0021: the erasure record.
        migrations.CreateModel(
            name="Erasure",
            fields=[
                (
                    "id",
                    models.UUIDField(
                        default=uuid6.uuid7, editable=False, primary_key=True, serialize=False
                    ),
                ),
                (
                    "scope",
                    cortex_sessions.fields.ScopeField(
                        editable=False, max_length=1024, verbose_name="scope"
                    ),
                ),
                (
                    "status",
                    models.CharField(
                        choices=[("pending", "pending"), ("running", "running"), ("done", "done")],
                        default="pending",
                        editable=False,
                        max_length=16,
                        verbose_name="status",
                    ),
                ),
                (
                    "counts",
                    models.JSONField(
                        default=dict, editable=False, verbose_name="deleted rows per table"
                    ),
                ),
                (
                    "skipped_held",
                    models.BigIntegerField(
                        default=0, editable=False, verbose_name="held sessions skipped"
                    ),
                ),
                (
                    "requested_by",
                    models.CharField(
                        blank=True, default="", max_length=255, verbose_name="requested by"
                    ),
                ),
                (
                    "created_at",
                    models.DateTimeField(
                        default=django.utils.timezone.now, editable=False, verbose_name="created at"
                    ),
                ),
                (
                    "finished_at",
                    models.DateTimeField(
                        blank=True, editable=False, null=True, verbose_name="finished at"
                    ),
                ),
            ],
            options={
                "verbose_name": "erasure",
                "verbose_name_plural": "erasures",
                "ordering": ["-created_at", "-id"],
                "permissions": [("erase_scope", "Can erase every session of a scope")],
            },
        ),
        # 0019 to 0023 on PostgreSQL: 1.0.0's functions dropped, each of this release's
        # created once.
        OnVendors(
            vendors=["postgresql"],
            operations=[
                _released(),
                *(migrations.RunSQL(create, drop, elidable=False) for create, drop in FUNCTIONS),
            ],
        ),
        # 0019's data step.
        migrations.RunPython(fill_token_counts, migrations.RunPython.noop, elidable=False),
    ]
