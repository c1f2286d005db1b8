"""``python -m bench.append_floor``: a turn's append against the best raw SQL for the same work.

``bench.runtimes`` times ``CortexChatMessageHistory.add_messages`` of a turn (two messages)
against ``langchain-postgres``'s ``PostgresChatMessageHistory``, whose append is a bare
``INSERT`` of two rows into a table with one index. The design asks more of an append
(docs/design.md §3, §11.5): the session's counters and ``last_message`` move in the same
transaction, the message rows carry a full-text column, and the session and message indexes
the reads use are kept. This splits the gap between the two: on one PostgreSQL database (as
``bench.runtimes``: ``BENCH_RUNTIMES_DATABASE``, created and migrated if missing), call by call
and alternating, it times

- **SDK store**: ``PostgresChatMessageHistory.add_messages`` (its own ``INSERT``);
- **floor**: that turn as the design stores it, sent as the best hand-written SQL on a psycopg
  connection that prepares it (``prepare_threshold=0``): one statement that updates the
  session row (counters, ``updated_at``, ``last_message``, within its scope and not archived)
  and inserts the two message rows (numbered from the session's ``last_seq``, their
  ``content`` blocks as the adapter writes them), one transaction;
- **adapter**: ``CortexChatMessageHistory.add_messages`` through Django.

The floor over the SDK store is what the design's work costs the server whatever the code;
the adapter over the floor is what cortex_sessions adds to it (the target: at most 1.2×).
Figures are in docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from .db import create_database, database_url
from .runtimes import DATABASE, TARGET
from .runtimes_more import SCOPE, _message, langchain_stores, time_calls
from .setup import setup_django

#: One statement for a turn of two messages: the session's counters, then its rows.
FLOOR_SQL = """
WITH s AS (
  UPDATE cortex_sessions_session
  SET last_seq = last_seq + 2, message_count = message_count + 2,
      context_tokens = context_tokens + %(tokens)s,
      updated_at = GREATEST(updated_at, %(now)s), last_message = %(last)s
  WHERE id = %(session)s AND scope = %(scope)s AND archived_at IS NULL
  RETURNING id, agent_id, scope, last_seq
)
INSERT INTO cortex_sessions_message
  (session_id, agent_id, scope, seq, role, source, content, metadata, created_at, token_count)
SELECT s.id, s.agent_id, s.scope, s.last_seq - 2 + v.ord, v.role, v.source, v.content, '{}',
       %(now)s, v.tokens
FROM s, (VALUES (1, 'user', 'user', %(first)s::jsonb, %(first_tokens)s::integer),
                (2, 'assistant', 'host', %(second)s::jsonb, %(second_tokens)s::integer))
     AS v(ord, role, source, content, tokens)
"""


def _content(message: Any) -> str:
    """The ``content`` blocks of a LangChain message as the adapter stores them: its text,
    then the message without its text (``text_at`` names where the text goes back)."""
    from langchain_core.messages import message_to_dict

    record = message_to_dict(message)
    text = record["data"].pop("content")
    blocks = [
        {"type": "text", "text": text},
        {"type": "langchain_message", "message": record, "text_at": ["data", "content"]},
    ]
    return json.dumps(blocks, separators=(",", ":"))


def run(url: str, reps: int) -> dict[str, float]:
    """Time the three appends of a turn on database ``url``; returns ms medians by name."""
    from datetime import UTC, datetime

    from psycopg import connect

    from cortex_sessions import services

    conn = connect(url, autocommit=True, prepare_threshold=0)
    try:
        ours, theirs = langchain_stores(conn)
        floor_session = services.create_session(scope=SCOPE, agent_id="bench")
        with conn.cursor() as cursor:
            cursor.execute("ANALYZE")
        counter = iter(range(10**9))

        def turn() -> list[Any]:
            return [_message(next(counter)), _message(next(counter))]

        def floor() -> None:
            first, second = turn()
            conn.execute(
                FLOOR_SQL,
                {
                    "session": floor_session.pk,
                    "scope": SCOPE,
                    "now": datetime.now(UTC),
                    "last": second.content,
                    "tokens": len(first.content) // 4 + len(second.content) // 4,
                    "first": _content(first),
                    "first_tokens": len(first.content) // 4,
                    "second": _content(second),
                    "second_tokens": len(second.content) // 4,
                },
            )

        figures = time_calls(
            {
                "SDK store": lambda: theirs.add_messages(turn()),
                "floor": floor,
                "adapter": lambda: ours.add_messages(turn()),
            },
            reps,
        )
        stored = services.get_session(scope=SCOPE, session_id=floor_session.pk)
        assert stored.message_count == stored.last_seq > 0, "the floor kept the counters"
        return figures
    finally:
        conn.close()


def main(argv: list[str] | None = None) -> None:
    """Parse the command line, prepare the database, run and print the table."""
    parser = argparse.ArgumentParser(prog="python -m bench.append_floor")
    parser.add_argument("--reps", type=int, default=300, help="timed repetitions of each append")
    args = parser.parse_args(argv)
    create_database(DATABASE)
    url = database_url(DATABASE)
    setup_django(url)
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    figures = run(url, args.reps)
    store, floor, adapter = figures["SDK store"], figures["floor"], figures["adapter"]
    print(f"A LangChain turn (2 messages) appended; medians of {args.reps} reps")
    print("| append | ms | / SDK store | / floor |")
    print("|---|---:|---:|---:|")
    print(f"| SDK store (bare INSERT) | {store:.3f} | 1.00× | {store / floor:.2f}× |")
    print(f"| floor (the design's work, raw SQL) | {floor:.3f} | {floor / store:.2f}× | 1.00× |")
    mark = "ok" if adapter / floor <= TARGET else "over"
    print(
        f"| adapter | {adapter:.3f} | {adapter / store:.2f}× | {adapter / floor:.2f}× "
        f"(≤ {TARGET}×: {mark}) |"
    )


if __name__ == "__main__":
    main()
