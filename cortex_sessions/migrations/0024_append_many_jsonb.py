"""The multi-message append parses its messages once (docs/design.md §14): on PostgreSQL
``cortex_sessions_append_many_v2`` is ``cortex_sessions_append_many_v1``
(``0022_append_many_function``) with its JSON array of messages cast to ``jsonb`` and read with
``jsonb_array_elements``. ``v1`` cast it to ``json``, whose operators parse the element's text
again on each of the seven reads of a message's fields, ~0.1 ms of the server's time for a
turn of two messages (docs/performance.md). What is stored is the same. Nothing existing is
locked or rewritten; other databases are not touched.

Deploying: code of this version calls ``_v2``, so run this migration before it serves (code of
this version on a database without it gets "function does not exist" on PostgreSQL for an
append of two or more messages, and nothing is written by a call the server refuses); code of
the previous release keeps calling ``_v1``, which this migration leaves in place for it (a later
migration drops it, as ``0018`` dropped the pre-release appends). The SQL below is a frozen copy
of ``_pg.function_sql``; ``tests/test_hot_paths.py`` checks that they agree. Backward, ``_v2``
is dropped.
"""

from __future__ import annotations

from django.db import migrations

from cortex_sessions.migrations._operations import OnVendors

CREATE_APPEND_MANY = 'CREATE OR REPLACE FUNCTION cortex_sessions_append_many_v2(bigint, bigint, bigint, bigint, numeric, bigint, timestamptz, text, uuid, text, text, text, text, bigint, text) RETURNS text[] LANGUAGE plpgsql AS $function$\n#variable_conflict use_column\nDECLARE\n  appended text[];\nBEGIN\n  WITH s AS ( UPDATE cortex_sessions_session s SET "last_seq" = s."last_seq" + $1, "message_count" = s."message_count" + $2, "input_tokens" = s."input_tokens" + $3, "output_tokens" = s."output_tokens" + $4, "cost" = s."cost" + $5, "context_tokens" = s."context_tokens" + $6, "updated_at" = GREATEST(s."updated_at", $7), "last_message" = COALESCE($8, s."last_message") WHERE s."id" = $9 AND s."archived_at" IS NULL AND CASE WHEN (s."scope" >= $10 AND s."scope" < $11 AND (s."scope" = $12 OR s."scope" >= $13)) AND (s."expires_at" IS NULL OR s."expires_at" > statement_timestamp()) THEN TRUE END RETURNING s."id", s."agent_id", s."scope", s."title", s."metadata", s."cwd", s."message_count", s."last_message", s."last_seq", s."is_default", s."default_flag", s."backfilled_by", s."created_at", s."updated_at", s."archived_at", s."forked_from", s."forked_at_seq", s."input_tokens", s."output_tokens", s."cost", s."context_tokens", s."expires_at", s."legal_hold"), m AS ( INSERT INTO cortex_sessions_message ("session_id", "agent_id", "scope", "seq", "role", "source", "content", "metadata", "created_at", "usage", "token_count") SELECT s."id", s."agent_id", s."scope", s."last_seq" - $14 + v.ord, v.e ->> 0, v.e ->> 1, v.e -> 2, v.e -> 3, (v.e ->> 4)::timestamptz, (v.e ->> 5)::jsonb, (v.e ->> 6)::integer FROM s, jsonb_array_elements($15::jsonb) WITH ORDINALITY AS v(e, ord) RETURNING "id", "seq") SELECT (SELECT ARRAY[s."agent_id"::text, s."scope"::text, s."title"::text, s."metadata"::text, s."cwd"::text, s."message_count"::text, s."last_message"::text, s."last_seq"::text, s."is_default"::text, s."default_flag"::text, s."backfilled_by"::text, s."created_at"::text, s."updated_at"::text, s."forked_from"::text, s."forked_at_seq"::text, s."input_tokens"::text, s."output_tokens"::text, s."cost"::text, s."context_tokens"::text, s."expires_at"::text, s."legal_hold"::text] FROM s) || array_agg(m."id"::text ORDER BY m."seq") INTO appended FROM m;\n  RETURN appended;\nEND\n$function$'

DROP_APPEND_MANY = "DROP FUNCTION IF EXISTS cortex_sessions_append_many_v2(bigint, bigint, bigint, bigint, numeric, bigint, timestamptz, text, uuid, text, text, text, text, bigint, text)"


class Migration(migrations.Migration):
    dependencies = [
        ("cortex_sessions", "0023_newest_page_function"),
    ]

    operations = [
        OnVendors(
            vendors=["postgresql"],
            operations=[
                migrations.RunSQL(CREATE_APPEND_MANY, DROP_APPEND_MANY, elidable=False),
            ],
        ),
    ]
