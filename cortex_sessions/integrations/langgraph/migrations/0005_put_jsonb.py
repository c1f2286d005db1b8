"""The LangGraph saver's put parses its mirrored messages once (docs/design.md §14.1, §19.1): on
PostgreSQL ``cortex_langgraph_put_v3`` is ``cortex_langgraph_put_v2`` (``0003_packed_writes``)
with the JSON array of the messages it mirrors cast to ``jsonb`` and read with
``jsonb_array_elements``, as the core's ``cortex_sessions_append_many_v2`` reads its own
(``cortex_sessions.0024_append_many_jsonb``). ``_v2`` cast it to ``json``, whose operators parse
a message's text again on each of the seven reads of its fields (docs/performance.md). What is
stored is the same.

``_v2`` is dropped: no code of this version calls it. Code and database on two sides of this
migration fail before writing (a call of a function the database does not have is refused at
parse time), so run it before this version serves. The SQL below is a frozen copy of
``cortex_sessions.integrations.langgraph._pg_writes.function_sql``;
``tests/runtimes/test_langgraph_writes.py`` checks that they agree. Backward, ``_v3`` is dropped
and ``_v2`` created again from ``0003_packed_writes``. Other databases: nothing.
"""

from __future__ import annotations

import importlib

from django.db import migrations

from cortex_sessions.migrations._operations import OnVendors

V2 = importlib.import_module("cortex_sessions.integrations.langgraph.migrations.0003_packed_writes")

CREATE_PUT = 'CREATE OR REPLACE FUNCTION cortex_langgraph_put_v3(uuid, text, text, text, text, text, text, text, text, text, bytea, text, timestamptz, text, bytea, text, integer, integer, bigint, bigint, numeric, bigint, timestamptz, text, uuid, integer, integer, text) RETURNS text[] LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $function$\n#variable_conflict use_column\nDECLARE\n  result text[];\nBEGIN\n  WITH v AS (SELECT s."id", s."archived_at" FROM cortex_sessions_session s WHERE s."id" = $1 AND CASE WHEN (s."scope" >= $2 AND s."scope" < $3 AND (s."scope" = $4 OR s."scope" >= $5)) AND (s."expires_at" IS NULL OR s."expires_at" > statement_timestamp()) THEN TRUE END AND s."agent_id" = COALESCE($6, s."agent_id") FOR NO KEY UPDATE), c AS ( INSERT INTO cortex_langgraph_checkpoint ("session_id", "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id", "type", "checkpoint", "metadata", "created_at") SELECT v."id", $7, $8, $9, $10, $11, $12::jsonb, $13 FROM v WHERE v."archived_at" IS NULL ON CONFLICT ("session_id", "checkpoint_ns", "checkpoint_id") DO UPDATE SET "parent_checkpoint_id" = EXCLUDED."parent_checkpoint_id", "type" = EXCLUDED."type", "checkpoint" = EXCLUDED."checkpoint", "metadata" = EXCLUDED."metadata" RETURNING (xmax = 0) AS inserted), b AS (INSERT INTO cortex_langgraph_checkpointblob ("session_id", "checkpoint_ns", "channel", "version", "type", "blob") SELECT v."id", $14, x.e ->> 0, x.e ->> 1, x.e ->> 2, substring($15 FROM (x.e ->> 3)::integer FOR (x.e ->> 4)::integer) FROM v, json_array_elements($16::json) AS x(e) WHERE v."archived_at" IS NULL ON CONFLICT ("session_id", "checkpoint_ns", "channel", "version") DO NOTHING), s AS ( UPDATE cortex_sessions_session s SET "last_seq" = s."last_seq" + $17, "message_count" = s."message_count" + $18, "input_tokens" = s."input_tokens" + $19, "output_tokens" = s."output_tokens" + $20, "cost" = s."cost" + $21, "context_tokens" = s."context_tokens" + $22, "updated_at" = GREATEST(s."updated_at", $23), "last_message" = COALESCE($24, s."last_message") WHERE s."id" = $25 AND $26 > 0 AND EXISTS (SELECT 1 FROM c WHERE c.inserted) RETURNING s."id", s."agent_id", s."scope", s."title", s."metadata", s."cwd", s."message_count", s."last_message", s."last_seq", s."is_default", s."default_flag", s."backfilled_by", s."created_at", s."updated_at", s."archived_at", s."forked_from", s."forked_at_seq", s."input_tokens", s."output_tokens", s."cost", s."context_tokens", s."expires_at", s."legal_hold"), m AS ( INSERT INTO cortex_sessions_message ("session_id", "agent_id", "scope", "seq", "role", "source", "content", "metadata", "created_at", "usage", "token_count") SELECT s."id", s."agent_id", s."scope", s."last_seq" - $27 + v.ord, v.e ->> 0, v.e ->> 1, v.e -> 2, v.e -> 3, (v.e ->> 4)::timestamptz, (v.e ->> 5)::jsonb, (v.e ->> 6)::integer FROM s, jsonb_array_elements($28::jsonb) WITH ORDINALITY AS v(e, ord) RETURNING "id", "seq") SELECT ARRAY[(v."archived_at" IS NULL)::text, (SELECT c.inserted FROM c)::text] || CASE WHEN s."id" IS NULL THEN \'{}\'::text[] ELSE ARRAY[s."id"::text, s."agent_id"::text, s."scope"::text, s."title"::text, s."metadata"::text, s."cwd"::text, s."message_count"::text, s."last_message"::text, s."last_seq"::text, s."is_default"::text, s."default_flag"::text, s."backfilled_by"::text, s."created_at"::text, s."updated_at"::text, s."archived_at"::text, s."forked_from"::text, s."forked_at_seq"::text, s."input_tokens"::text, s."output_tokens"::text, s."cost"::text, s."context_tokens"::text, s."expires_at"::text, s."legal_hold"::text] END || COALESCE((SELECT array_agg(x.t ORDER BY m."seq", x.o) FROM m, unnest(ARRAY[m."id"::text, m."seq"::text]) WITH ORDINALITY AS x(t, o)), \'{}\'::text[]) INTO result FROM v LEFT JOIN s ON TRUE;\n  RETURN result;\nEND\n$function$'

DROP_PUT = "DROP FUNCTION IF EXISTS cortex_langgraph_put_v3(uuid, text, text, text, text, text, text, text, text, text, bytea, text, timestamptz, text, bytea, text, integer, integer, bigint, bigint, numeric, bigint, timestamptz, text, uuid, integer, integer, text)"


class Migration(migrations.Migration):
    dependencies = [("cortex_langgraph", "0004_write_blob_null")]

    operations = [
        OnVendors(
            vendors=["postgresql"],
            operations=[
                migrations.RunSQL(
                    [V2.DROP_PUT, CREATE_PUT],
                    [DROP_PUT, V2.CREATE_PUT],
                    elidable=False,
                )
            ],
        ),
    ]
