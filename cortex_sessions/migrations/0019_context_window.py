"""The context window's columns (docs/design.md §16.1-§16.3): a message's ``usage``,
``token_count`` and ``compacts_through_seq``; a session's totals ``input_tokens``,
``output_tokens``, ``cost`` and ``context_tokens``.

- The columns are added with constant database defaults (on PostgreSQL 11+ and MariaDB 10.3+ a
  change of the catalogue only, no table rewrite), which they keep: a row written by a host's
  own SQL starts at zero.
- On PostgreSQL the hot-path functions are replaced (docs/design.md §14.1): the append becomes
  ``cortex_sessions_append_one_v5`` (it moves the totals and writes ``usage`` and
  ``token_count``), the session reads ``cortex_sessions_get_v2`` and
  ``cortex_sessions_resolve_v2`` (their text array has the new columns); ``_v4`` and the two
  ``_v1`` are dropped, since no code of this version calls them. Code and database on two
  sides of this migration fail before writing: a call of a function the database does not
  have is refused at parse time. The SQL below is a frozen copy of ``_pg.function_sql``;
  ``tests/test_hot_paths.py`` checks that they agree.
- A data step gives every existing message its ``token_count`` (from ``TOKEN_COUNTER`` as
  configured when it runs) and every session its ``context_tokens`` (the sum over its
  messages: no compaction exists before this migration), ``_operations.BATCH_SIZE`` rows at a
  time with keyset pagination, so memory stays bounded whatever the table's size. Usage totals
  start at zero: no message had a usage before. The step is ``_operations.fill_token_counts``,
  which the squash ``0019_squashed_0023_context_retention_erasure_and_functions`` runs too.

Backward: the data step does nothing, the previous functions are created again (from the
squash's frozen SQL) and the columns are dropped.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db import migrations, models
from django.db.migrations.operations.base import Operation

from cortex_sessions.migrations._operations import OnVendors, fill_token_counts

CREATE_APPEND_ONE = (
    "CREATE OR REPLACE FUNCTION cortex_sessions_append_one_v5(bigint, bigint, numeric,"
    " bigint, timestamptz, text, uuid, text, text, text, text, text, text, text, text,"
    " timestamptz, text, integer) RETURNS text[] LANGUAGE plpgsql AS $function$\n"
    "#variable_conflict use_column\n"
    "DECLARE\n"
    "  appended text[];\n"
    "BEGIN\n"
    '  WITH s AS ( UPDATE cortex_sessions_session s SET "last_seq" = s."last_seq" + 1,'
    ' "message_count" = s."message_count" + 1, "input_tokens" = s."input_tokens" + $1,'
    ' "output_tokens" = s."output_tokens" + $2, "cost" = s."cost" + $3, "context_tokens" ='
    ' s."context_tokens" + $4, "updated_at" = GREATEST(s."updated_at", $5), "last_message"'
    ' = COALESCE($6, s."last_message") WHERE s."id" = $7 AND s."archived_at" IS NULL AND'
    ' CASE WHEN (s."scope" >= $8 AND s."scope" < $9 AND (s."scope" = $10 OR s."scope" >='
    ' $11)) THEN TRUE END RETURNING s."id", s."agent_id", s."scope", s."title",'
    ' s."metadata", s."cwd", s."message_count", s."last_message", s."last_seq",'
    ' s."is_default", s."default_flag", s."backfilled_by", s."created_at", s."updated_at",'
    ' s."archived_at", s."forked_from", s."forked_at_seq", s."input_tokens",'
    ' s."output_tokens", s."cost", s."context_tokens"), m AS ( INSERT INTO'
    ' cortex_sessions_message ("session_id", "agent_id", "scope", "seq", "role", "source",'
    ' "content", "metadata", "created_at", "usage", "token_count") SELECT s."id",'
    ' s."agent_id", s."scope", s."last_seq", $12, $13, $14::jsonb, $15::jsonb, $16,'
    ' $17::jsonb, $18 FROM s RETURNING "id", "seq") SELECT ARRAY[s."agent_id"::text,'
    ' s."scope"::text, s."title"::text, s."metadata"::text, s."cwd"::text,'
    ' s."message_count"::text, s."last_message"::text, s."last_seq"::text,'
    ' s."is_default"::text, s."default_flag"::text, s."backfilled_by"::text,'
    ' s."created_at"::text, s."updated_at"::text, s."forked_from"::text,'
    ' s."forked_at_seq"::text, s."input_tokens"::text, s."output_tokens"::text,'
    ' s."cost"::text, s."context_tokens"::text, m."id"::text, m."seq"::text] INTO appended'
    " FROM s, m;\n"
    "  RETURN appended;\n"
    "END\n"
    "$function$"
)

DROP_APPEND_ONE = "DROP FUNCTION IF EXISTS cortex_sessions_append_one_v5(bigint, bigint, numeric, bigint, timestamptz, text, uuid, text, text, text, text, text, text, text, text, timestamptz, text, integer)"

CREATE_GET = (
    "CREATE OR REPLACE FUNCTION cortex_sessions_get_v2(uuid, text, text, text, text, text)"
    " RETURNS text[] LANGUAGE plpgsql STABLE AS $function$\n"
    "#variable_conflict use_column\n"
    "DECLARE\n"
    "  loaded text[];\n"
    "BEGIN\n"
    '  SELECT ARRAY[s."id"::text, s."agent_id"::text, s."scope"::text, s."title"::text,'
    ' s."metadata"::text, s."cwd"::text, s."message_count"::text, s."last_message"::text,'
    ' s."last_seq"::text, s."is_default"::text, s."default_flag"::text,'
    ' s."backfilled_by"::text, s."created_at"::text, s."updated_at"::text,'
    ' s."archived_at"::text, s."forked_from"::text, s."forked_at_seq"::text,'
    ' s."input_tokens"::text, s."output_tokens"::text, s."cost"::text,'
    ' s."context_tokens"::text] INTO loaded FROM cortex_sessions_session s WHERE s."id" ='
    ' $1 AND CASE WHEN (s."scope" >= $2 AND s."scope" < $3 AND (s."scope" = $4 OR'
    ' s."scope" >= $5)) THEN TRUE END AND s."agent_id" = COALESCE($6, s."agent_id");\n'
    "  RETURN loaded;\n"
    "END\n"
    "$function$"
)

DROP_GET = "DROP FUNCTION IF EXISTS cortex_sessions_get_v2(uuid, text, text, text, text, text)"

CREATE_RESOLVE = (
    "CREATE OR REPLACE FUNCTION cortex_sessions_resolve_v2(text, text) RETURNS text[]"
    " LANGUAGE plpgsql STABLE AS $function$\n"
    "#variable_conflict use_column\n"
    "DECLARE\n"
    "  loaded text[];\n"
    "BEGIN\n"
    '  SELECT ARRAY[s."id"::text, s."agent_id"::text, s."scope"::text, s."title"::text,'
    ' s."metadata"::text, s."cwd"::text, s."message_count"::text, s."last_message"::text,'
    ' s."last_seq"::text, s."is_default"::text, s."default_flag"::text,'
    ' s."backfilled_by"::text, s."created_at"::text, s."updated_at"::text,'
    ' s."archived_at"::text, s."forked_from"::text, s."forked_at_seq"::text,'
    ' s."input_tokens"::text, s."output_tokens"::text, s."cost"::text,'
    ' s."context_tokens"::text] INTO loaded FROM cortex_sessions_session s WHERE'
    ' s."agent_id" = $1 AND s."scope" = $2 AND s."is_default";\n'
    "  RETURN loaded;\n"
    "END\n"
    "$function$"
)

DROP_RESOLVE = "DROP FUNCTION IF EXISTS cortex_sessions_resolve_v2(text, text)"


def _previous() -> Any:
    """The squash that created ``_v4`` and the two ``_v1`` (their frozen SQL)."""
    import importlib

    return importlib.import_module(
        "cortex_sessions.migrations.0012_squashed_0018_search_and_functions"
    )


def _functions() -> list[Operation]:
    """Drop the previous functions and create the new ones (backward: the other way)."""
    old = _previous()
    return [
        migrations.RunSQL(old.DROP_APPEND_ONE, old.CREATE_APPEND_ONE, elidable=False),
        migrations.RunSQL(old.DROP_GET, old.CREATE_GET, elidable=False),
        migrations.RunSQL(old.DROP_RESOLVE, old.CREATE_RESOLVE, elidable=False),
        migrations.RunSQL(CREATE_APPEND_ONE, DROP_APPEND_ONE, elidable=False),
        migrations.RunSQL(CREATE_GET, DROP_GET, elidable=False),
        migrations.RunSQL(CREATE_RESOLVE, DROP_RESOLVE, elidable=False),
    ]


class Migration(migrations.Migration):
    dependencies = [
        ("cortex_sessions", "0018_drop_pre_release_append_functions"),
    ]

    operations = [
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
        OnVendors(vendors=["postgresql"], operations=_functions()),
        migrations.RunPython(fill_token_counts, migrations.RunPython.noop, elidable=False),
    ]
