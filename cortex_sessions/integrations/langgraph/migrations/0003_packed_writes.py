"""The LangGraph saver's writes with their bytes packed (docs/design.md §14.1, §19.1): on
PostgreSQL ``cortex_langgraph_put_v2`` and ``cortex_langgraph_writes_v2`` take a checkpoint's
blobs and a task's writes as two parameters, the bytes joined into one ``bytea`` and a JSON text
of each row with its start and length in them (``_pg_writes._packed``), where the ``_v1``
functions of ``0002_functions`` took four arrays that psycopg dumps element by element in
Python (about 50 µs a call; docs/performance.md). What each row stores is unchanged.

The ``_v1`` functions are dropped: no code of this version calls them. Code and database on two
sides of this migration fail before writing (a call of a function the database does not have is
refused at parse time), so run it before this version serves. The SQL below is a frozen copy of
``cortex_sessions.integrations.langgraph._pg_writes.function_sql``;
``tests/runtimes/test_langgraph_writes.py`` checks that they agree. Backward, the ``_v2``
functions are dropped and the ``_v1`` ones created again from ``0002_functions``. Other
databases: nothing.
"""

from __future__ import annotations

import importlib

from django.db import migrations

from cortex_sessions.migrations._operations import OnVendors

V1 = importlib.import_module("cortex_sessions.integrations.langgraph.migrations.0002_functions")

CREATE_PUT = 'CREATE OR REPLACE FUNCTION cortex_langgraph_put_v2(uuid, text, text, text, text, text, text, text, text, text, bytea, text, timestamptz, text, bytea, text, integer, integer, bigint, bigint, numeric, bigint, timestamptz, text, uuid, integer, integer, text) RETURNS text[] LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $function$\n#variable_conflict use_column\nDECLARE\n  result text[];\nBEGIN\n  WITH v AS (SELECT s."id", s."archived_at" FROM cortex_sessions_session s WHERE s."id" = $1 AND CASE WHEN (s."scope" >= $2 AND s."scope" < $3 AND (s."scope" = $4 OR s."scope" >= $5)) AND (s."expires_at" IS NULL OR s."expires_at" > statement_timestamp()) THEN TRUE END AND s."agent_id" = COALESCE($6, s."agent_id") FOR NO KEY UPDATE), c AS ( INSERT INTO cortex_langgraph_checkpoint ("session_id", "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id", "type", "checkpoint", "metadata", "created_at") SELECT v."id", $7, $8, $9, $10, $11, $12::jsonb, $13 FROM v WHERE v."archived_at" IS NULL ON CONFLICT ("session_id", "checkpoint_ns", "checkpoint_id") DO UPDATE SET "parent_checkpoint_id" = EXCLUDED."parent_checkpoint_id", "type" = EXCLUDED."type", "checkpoint" = EXCLUDED."checkpoint", "metadata" = EXCLUDED."metadata" RETURNING (xmax = 0) AS inserted), b AS (INSERT INTO cortex_langgraph_checkpointblob ("session_id", "checkpoint_ns", "channel", "version", "type", "blob") SELECT v."id", $14, x.e ->> 0, x.e ->> 1, x.e ->> 2, substring($15 FROM (x.e ->> 3)::integer FOR (x.e ->> 4)::integer) FROM v, json_array_elements($16::json) AS x(e) WHERE v."archived_at" IS NULL ON CONFLICT ("session_id", "checkpoint_ns", "channel", "version") DO NOTHING), s AS ( UPDATE cortex_sessions_session s SET "last_seq" = s."last_seq" + $17, "message_count" = s."message_count" + $18, "input_tokens" = s."input_tokens" + $19, "output_tokens" = s."output_tokens" + $20, "cost" = s."cost" + $21, "context_tokens" = s."context_tokens" + $22, "updated_at" = GREATEST(s."updated_at", $23), "last_message" = COALESCE($24, s."last_message") WHERE s."id" = $25 AND $26 > 0 AND EXISTS (SELECT 1 FROM c WHERE c.inserted) RETURNING s."id", s."agent_id", s."scope", s."title", s."metadata", s."cwd", s."message_count", s."last_message", s."last_seq", s."is_default", s."default_flag", s."backfilled_by", s."created_at", s."updated_at", s."archived_at", s."forked_from", s."forked_at_seq", s."input_tokens", s."output_tokens", s."cost", s."context_tokens", s."expires_at", s."legal_hold"), m AS ( INSERT INTO cortex_sessions_message ("session_id", "agent_id", "scope", "seq", "role", "source", "content", "metadata", "created_at", "usage", "token_count") SELECT s."id", s."agent_id", s."scope", s."last_seq" - $27 + v.ord, v.e ->> 0, v.e ->> 1, (v.e -> 2)::jsonb, (v.e -> 3)::jsonb, (v.e ->> 4)::timestamptz, (v.e ->> 5)::jsonb, (v.e ->> 6)::integer FROM s, json_array_elements($28::json) WITH ORDINALITY AS v(e, ord) RETURNING "id", "seq") SELECT ARRAY[(v."archived_at" IS NULL)::text, (SELECT c.inserted FROM c)::text] || CASE WHEN s."id" IS NULL THEN \'{}\'::text[] ELSE ARRAY[s."id"::text, s."agent_id"::text, s."scope"::text, s."title"::text, s."metadata"::text, s."cwd"::text, s."message_count"::text, s."last_message"::text, s."last_seq"::text, s."is_default"::text, s."default_flag"::text, s."backfilled_by"::text, s."created_at"::text, s."updated_at"::text, s."archived_at"::text, s."forked_from"::text, s."forked_at_seq"::text, s."input_tokens"::text, s."output_tokens"::text, s."cost"::text, s."context_tokens"::text, s."expires_at"::text, s."legal_hold"::text] END || COALESCE((SELECT array_agg(x.t ORDER BY m."seq", x.o) FROM m, unnest(ARRAY[m."id"::text, m."seq"::text]) WITH ORDINALITY AS x(t, o)), \'{}\'::text[]) INTO result FROM v LEFT JOIN s ON TRUE;\n  RETURN result;\nEND\n$function$'

DROP_PUT = "DROP FUNCTION IF EXISTS cortex_langgraph_put_v2(uuid, text, text, text, text, text, text, text, text, text, bytea, text, timestamptz, text, bytea, text, integer, integer, bigint, bigint, numeric, bigint, timestamptz, text, uuid, integer, integer, text)"

CREATE_WRITES = 'CREATE OR REPLACE FUNCTION cortex_langgraph_writes_v2(uuid, text, text, text, text, text, text, text, text, text, bytea, text, boolean) RETURNS boolean LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $function$\n#variable_conflict use_column\nDECLARE\n  result boolean;\nBEGIN\n  WITH v AS (SELECT s."id", s."archived_at" FROM cortex_sessions_session s WHERE s."id" = $1 AND CASE WHEN (s."scope" >= $2 AND s."scope" < $3 AND (s."scope" = $4 OR s."scope" >= $5)) AND (s."expires_at" IS NULL OR s."expires_at" > statement_timestamp()) THEN TRUE END AND s."agent_id" = COALESCE($6, s."agent_id")), w AS ( INSERT INTO cortex_langgraph_checkpointwrite ("session_id", "checkpoint_ns", "checkpoint_id", "task_id", "task_path", "idx", "channel", "type", "blob") SELECT v."id", $7, $8, $9, $10, (x.e ->> 0)::integer, x.e ->> 1, x.e ->> 2, substring($11 FROM (x.e ->> 3)::integer FOR (x.e ->> 4)::integer) FROM v, json_array_elements($12::json) AS x(e) WHERE v."archived_at" IS NULL ON CONFLICT ("session_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx") DO UPDATE SET "channel" = EXCLUDED."channel", "type" = EXCLUDED."type", "blob" = EXCLUDED."blob", "task_path" = EXCLUDED."task_path" WHERE $13) SELECT v."archived_at" IS NULL INTO result FROM v;\n  RETURN result;\nEND\n$function$'

DROP_WRITES = "DROP FUNCTION IF EXISTS cortex_langgraph_writes_v2(uuid, text, text, text, text, text, text, text, text, text, bytea, text, boolean)"

#: The ``_v1`` functions with this migration's signatures, which ``0002_functions`` created for
#: a while on the development branch (changed in place, before this migration): dropped too.
CHANGED_IN_PLACE = [
    DROP_PUT.replace("cortex_langgraph_put_v2", "cortex_langgraph_put_v1"),
    DROP_WRITES.replace("cortex_langgraph_writes_v2", "cortex_langgraph_writes_v1"),
]


class Migration(migrations.Migration):
    dependencies = [("cortex_langgraph", "0002_functions")]

    operations = [
        OnVendors(
            vendors=["postgresql"],
            operations=[
                migrations.RunSQL(
                    [
                        V1.DROP_PUT,
                        V1.DROP_WRITES,
                        *CHANGED_IN_PLACE,
                        CREATE_PUT,
                        CREATE_WRITES,
                    ],
                    [DROP_PUT, DROP_WRITES, V1.CREATE_PUT, V1.CREATE_WRITES],
                    elidable=False,
                )
            ],
        ),
    ]
