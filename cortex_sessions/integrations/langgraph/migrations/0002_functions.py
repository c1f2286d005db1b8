"""The LangGraph saver's functions on PostgreSQL (docs/design.md §14.1, §19.1):
``cortex_langgraph_put_v1`` (a checkpoint of an existing thread stored, its blobs, and its new
messages mirrored into the session with the counters moved, in one call) and
``cortex_langgraph_writes_v1`` (a task's pending writes) and ``cortex_langgraph_latest_v1`` (the
latest checkpoint of a thread's namespace, with its pending writes and channel values). PL/pgSQL
keeps each statement's plan for the server session (``plan_cache_mode = force_generic_plan``),
where the statements sent as text were planned on every call.

Nothing existing is locked or rewritten: three functions are created (backward: dropped). Code
of this version calls them, so run this migration before it serves; a call the server refuses
("function does not exist") writes nothing. The SQL below is a frozen copy of
``cortex_sessions.integrations.langgraph._pg_writes.function_sql``;
``tests/runtimes/test_langgraph_writes.py`` checks that they agree, so a change to a statement
or to the session's columns comes with a migration adding the function under a new name. Other
databases: nothing.
"""

from __future__ import annotations

from django.db import migrations

from cortex_sessions.migrations._operations import OnVendors

CREATE_PUT = 'CREATE OR REPLACE FUNCTION cortex_langgraph_put_v1(uuid, text, text, text, text, text, text, text, text, text, bytea, text, timestamptz, text, text[], text[], text[], bytea[], integer, integer, bigint, bigint, numeric, bigint, timestamptz, text, uuid, integer, integer, text) RETURNS text[] LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $function$\n#variable_conflict use_column\nDECLARE\n  result text[];\nBEGIN\n  WITH v AS (SELECT s."id", s."archived_at" FROM cortex_sessions_session s WHERE s."id" = $1 AND CASE WHEN (s."scope" >= $2 AND s."scope" < $3 AND (s."scope" = $4 OR s."scope" >= $5)) AND (s."expires_at" IS NULL OR s."expires_at" > statement_timestamp()) THEN TRUE END AND s."agent_id" = COALESCE($6, s."agent_id") FOR NO KEY UPDATE), c AS ( INSERT INTO cortex_langgraph_checkpoint ("session_id", "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id", "type", "checkpoint", "metadata", "created_at") SELECT v."id", $7, $8, $9, $10, $11, $12::jsonb, $13 FROM v WHERE v."archived_at" IS NULL ON CONFLICT ("session_id", "checkpoint_ns", "checkpoint_id") DO UPDATE SET "parent_checkpoint_id" = EXCLUDED."parent_checkpoint_id", "type" = EXCLUDED."type", "checkpoint" = EXCLUDED."checkpoint", "metadata" = EXCLUDED."metadata" RETURNING (xmax = 0) AS inserted), b AS (INSERT INTO cortex_langgraph_checkpointblob ("session_id", "checkpoint_ns", "channel", "version", "type", "blob") SELECT v."id", $14, x.channel, x.version, x.type, x.blob FROM v, unnest($15, $16, $17, $18) AS x(channel, version, type, blob) WHERE v."archived_at" IS NULL ON CONFLICT ("session_id", "checkpoint_ns", "channel", "version") DO NOTHING), s AS ( UPDATE cortex_sessions_session s SET "last_seq" = s."last_seq" + $19, "message_count" = s."message_count" + $20, "input_tokens" = s."input_tokens" + $21, "output_tokens" = s."output_tokens" + $22, "cost" = s."cost" + $23, "context_tokens" = s."context_tokens" + $24, "updated_at" = GREATEST(s."updated_at", $25), "last_message" = COALESCE($26, s."last_message") WHERE s."id" = $27 AND $28 > 0 AND EXISTS (SELECT 1 FROM c WHERE c.inserted) RETURNING s."id", s."agent_id", s."scope", s."title", s."metadata", s."cwd", s."message_count", s."last_message", s."last_seq", s."is_default", s."default_flag", s."backfilled_by", s."created_at", s."updated_at", s."archived_at", s."forked_from", s."forked_at_seq", s."input_tokens", s."output_tokens", s."cost", s."context_tokens", s."expires_at", s."legal_hold"), m AS ( INSERT INTO cortex_sessions_message ("session_id", "agent_id", "scope", "seq", "role", "source", "content", "metadata", "created_at", "usage", "token_count") SELECT s."id", s."agent_id", s."scope", s."last_seq" - $29 + v.ord, v.e ->> 0, v.e ->> 1, (v.e -> 2)::jsonb, (v.e -> 3)::jsonb, (v.e ->> 4)::timestamptz, (v.e ->> 5)::jsonb, (v.e ->> 6)::integer FROM s, json_array_elements($30::json) WITH ORDINALITY AS v(e, ord) RETURNING "id", "seq") SELECT ARRAY[(v."archived_at" IS NULL)::text, (SELECT c.inserted FROM c)::text] || CASE WHEN s."id" IS NULL THEN \'{}\'::text[] ELSE ARRAY[s."id"::text, s."agent_id"::text, s."scope"::text, s."title"::text, s."metadata"::text, s."cwd"::text, s."message_count"::text, s."last_message"::text, s."last_seq"::text, s."is_default"::text, s."default_flag"::text, s."backfilled_by"::text, s."created_at"::text, s."updated_at"::text, s."archived_at"::text, s."forked_from"::text, s."forked_at_seq"::text, s."input_tokens"::text, s."output_tokens"::text, s."cost"::text, s."context_tokens"::text, s."expires_at"::text, s."legal_hold"::text] END || COALESCE((SELECT array_agg(x.t ORDER BY m."seq", x.o) FROM m, unnest(ARRAY[m."id"::text, m."seq"::text]) WITH ORDINALITY AS x(t, o)), \'{}\'::text[]) INTO result FROM v LEFT JOIN s ON TRUE;\n  RETURN result;\nEND\n$function$'

DROP_PUT = "DROP FUNCTION IF EXISTS cortex_langgraph_put_v1(uuid, text, text, text, text, text, text, text, text, text, bytea, text, timestamptz, text, text[], text[], text[], bytea[], integer, integer, bigint, bigint, numeric, bigint, timestamptz, text, uuid, integer, integer, text)"

CREATE_WRITES = 'CREATE OR REPLACE FUNCTION cortex_langgraph_writes_v1(uuid, text, text, text, text, text, text, text, text, text, integer[], text[], text[], bytea[], boolean) RETURNS boolean LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $function$\n#variable_conflict use_column\nDECLARE\n  result boolean;\nBEGIN\n  WITH v AS (SELECT s."id", s."archived_at" FROM cortex_sessions_session s WHERE s."id" = $1 AND CASE WHEN (s."scope" >= $2 AND s."scope" < $3 AND (s."scope" = $4 OR s."scope" >= $5)) AND (s."expires_at" IS NULL OR s."expires_at" > statement_timestamp()) THEN TRUE END AND s."agent_id" = COALESCE($6, s."agent_id")), w AS ( INSERT INTO cortex_langgraph_checkpointwrite ("session_id", "checkpoint_ns", "checkpoint_id", "task_id", "task_path", "idx", "channel", "type", "blob") SELECT v."id", $7, $8, $9, $10, x.idx, x.channel, x.type, x.blob FROM v, unnest($11, $12, $13, $14) AS x(idx, channel, type, blob) WHERE v."archived_at" IS NULL ON CONFLICT ("session_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx") DO UPDATE SET "channel" = EXCLUDED."channel", "type" = EXCLUDED."type", "blob" = EXCLUDED."blob", "task_path" = EXCLUDED."task_path" WHERE $15) SELECT v."archived_at" IS NULL INTO result FROM v;\n  RETURN result;\nEND\n$function$'

DROP_WRITES = "DROP FUNCTION IF EXISTS cortex_langgraph_writes_v1(uuid, text, text, text, text, text, text, text, text, text, integer[], text[], text[], bytea[], boolean)"

CREATE_LATEST = "CREATE OR REPLACE FUNCTION cortex_langgraph_latest_v1(uuid, text, text, text, text, text, uuid, text, uuid, text, uuid, text, bigint) RETURNS TABLE(r_kind integer, r_ns text, r_id text, r_parent text, r_type text, r_body bytea, r_metadata jsonb, r_newest bytea[], r_writes bytea[]) LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan AS $function$\n#variable_conflict use_column\nBEGIN\n  RETURN QUERY SELECT r.kind, r.ns::text, r.id::text, r.parent::text, r.type::text, r.body, r.metadata, r.newest, r.writes FROM (WITH RECURSIVE ok AS (SELECT 1 FROM \"cortex_sessions_session\" s WHERE s.id = $1 AND CASE WHEN s.scope >= $2 AND s.scope < $3 AND (s.scope = $4 OR s.scope >= $5) AND (s.expires_at IS NULL OR s.expires_at > statement_timestamp()) THEN TRUE END AND s.agent_id = COALESCE($6, s.agent_id)), ch AS ((SELECT b.checkpoint_ns, b.channel, b.version, b.type, b.blob FROM \"cortex_langgraph_checkpointblob\" b WHERE b.session_id = $7 AND b.checkpoint_ns = $8 ORDER BY b.channel DESC, b.version DESC LIMIT 1) UNION ALL SELECT n.* FROM ch CROSS JOIN LATERAL (SELECT b.checkpoint_ns, b.channel, b.version, b.type, b.blob FROM \"cortex_langgraph_checkpointblob\" b WHERE b.session_id = $9 AND b.checkpoint_ns = $10 AND b.channel < ch.channel ORDER BY b.channel DESC, b.version DESC LIMIT 1) n) (SELECT 0 AS kind, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.type, c.checkpoint, c.metadata, (SELECT array_agg(ARRAY[convert_to(ch.channel, 'UTF8'), convert_to(ch.version, 'UTF8'), convert_to(ch.type, 'UTF8'), ch.blob]) FROM ch), (SELECT array_agg(ARRAY[convert_to(w.task_id, 'UTF8'), convert_to(w.channel, 'UTF8'), convert_to(w.type, 'UTF8'), w.blob, convert_to(w.task_path, 'UTF8'), convert_to(w.idx::text, 'UTF8')]) FROM \"cortex_langgraph_checkpointwrite\" w WHERE w.session_id = c.session_id AND w.checkpoint_ns = c.checkpoint_ns AND w.checkpoint_id = c.checkpoint_id) FROM \"cortex_langgraph_checkpoint\" c WHERE c.session_id = $11 AND EXISTS (SELECT 1 FROM ok) AND c.checkpoint_ns = $12 ORDER BY c.checkpoint_id DESC, c.checkpoint_ns LIMIT $13)) AS r(kind, ns, id, parent, type, body, metadata, newest, writes);\nEND\n$function$"

DROP_LATEST = "DROP FUNCTION IF EXISTS cortex_langgraph_latest_v1(uuid, text, text, text, text, text, uuid, text, uuid, text, uuid, text, bigint)"


class Migration(migrations.Migration):
    dependencies = [
        ("cortex_langgraph", "0001_langgraph_checkpoints"),
        ("cortex_sessions", "0020_retention"),
    ]

    operations = [
        OnVendors(
            vendors=["postgresql"],
            operations=[
                migrations.RunSQL(
                    [CREATE_PUT, CREATE_WRITES, CREATE_LATEST],
                    [DROP_PUT, DROP_WRITES, DROP_LATEST],
                    elidable=False,
                )
            ],
        ),
    ]
