"""Benchmark: preparing a session reference to a 100,000-message session (docs/design.md §8.6).

Prints figures; it is not a test. Run from the repository root:

    python -m bench.bench_references [--messages 100000] [--runs 9] [--naive-seconds 120]

``BENCH_DATABASE_URL`` names the PostgreSQL database (default
``postgres://postgres@127.0.0.1:5432/cortex_bench``); it is created and migrated if missing. The
referenced session is built once with ``COPY`` and reused by later runs (``--rebuild`` forces a
new one).

Two implementations are timed on the same rows:

- ``prepare_references`` — the app: reads the newest checkpoint, a count and the newest
  conversation messages in small chunks, and stops once the budget is full (median of
  ``--runs`` runs after one warm-up).
- the naive original — load the whole surface (every message from the newest checkpoint on),
  project it, then drop the oldest message and re-serialize the whole snapshot until it fits.
  That is quadratic: on 100,000 messages it runs for hours, so by default it stops after
  ``--naive-seconds`` and the total is extrapolated from the serialization throughput it
  measured and the exact sizes of the snapshots it still had to serialize. The ratio is
  printed both as a measured lower bound and as the extrapolation. ``--naive-full`` runs it to
  the end instead.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as ``python -m bench.…``

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/cortex_bench"
SCOPE = "org=bench/user=1"
AGENT = "bench-agent"
NAMESPACE = uuid.UUID("6f0c7d1e-3c43-4f57-9a53-5b6f2f0b9a10")
CHECKPOINT_SEQ = 1_000
SEED = 20_261_130


# -- set-up ---------------------------------------------------------------------------------------


def setup_django(url: str, budget: int) -> None:
    """Configure a minimal Django project on ``url``, creating and migrating the database."""
    import dj_database_url
    import django
    import psycopg
    from django.conf import settings
    from django.core.management import call_command

    database = dj_database_url.parse(url, conn_max_age=0)
    if database["ENGINE"] != "django.db.backends.postgresql":
        raise SystemExit("The benchmark needs PostgreSQL (BENCH_DATABASE_URL=postgres://...).")
    admin = {
        "host": database.get("HOST") or None,
        "port": database.get("PORT") or None,
        "user": database.get("USER") or None,
        "password": database.get("PASSWORD") or None,
        "dbname": "postgres",
    }
    with psycopg.connect(**{k: v for k, v in admin.items() if v}, autocommit=True) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [database["NAME"]]
        ).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{database["NAME"]}"')
    settings.configure(
        DATABASES={"default": database},
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "cortex_sessions"],
        USE_TZ=True,
        TIME_ZONE="UTC",
        SECRET_KEY="cortex-sessions-bench",
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        CORTEX_SESSIONS={"MAX_REFERENCE_BYTES": budget},
    )
    django.setup()
    call_command("migrate", verbosity=0)


# -- the data -------------------------------------------------------------------------------------

_VOCABULARY = (
    "the session agent reference budget snapshot message checkpoint deploy migration index "
    "query postgres latency cache request response token model context window tool result "
    "error retry schema field value config build test release branch commit review merge "
    "function class module import return yield async await handler router view serializer "
    "café naïve résumé 数据库 会话 引用 😀 👍🏽 ✅"
)
_WORDS = _VOCABULARY.split()
_CODE = (
    "\n```python\ndef handler(request):\n    if a < b and b > c:\n        return {'ok': True}\n"
    "```\n"
)
_HTML = '<div class="x">see <b>this</b></div> '


def _corpus(rng: random.Random, size: int = 1_500_000) -> str:
    parts: list[str] = []
    length = 0
    while length < size:
        roll = rng.random()
        piece = _CODE if roll < 0.01 else _HTML if roll < 0.015 else rng.choice(_WORDS)
        piece += "\n" if rng.random() < 0.03 else " "
        parts.append(piece)
        length += len(piece)
    return "".join(parts)


def _size(rng: random.Random, median: float, sigma: float, low: int, high: int) -> int:
    return max(low, min(high, int(rng.lognormvariate(0, sigma) * median)))


def generate(count: int):
    """Yield ``(seq, role, source, content)`` for a realistic agent session of ``count`` rows.

    Turns: a user message (median ~200 characters, long pastes sometimes), one to three tool
    rounds (an assistant message with a tool call and sometimes a short text, then a tool
    result of median ~1.5 KB, up to 40 KB), a final assistant answer (median ~700 characters,
    up to 12 KB), now and then a host note; one checkpoint summary (~6 KB) at the first turn
    boundary at or after ``CHECKPOINT_SEQ``.
    """
    rng = random.Random(SEED)
    corpus = _corpus(rng)

    def text(median: float, sigma: float, low: int, high: int) -> str:
        n = _size(rng, median, sigma, low, high)
        start = rng.randrange(0, len(corpus) - n)
        return corpus[start : start + n]

    seq = 0

    def emit(role: str, source: str, content: list):
        nonlocal seq
        seq += 1
        return (seq, role, source, content)

    checkpointed = False
    while seq < count:
        if not checkpointed and seq + 1 >= CHECKPOINT_SEQ:
            checkpointed = True
            yield emit(
                "user", "checkpoint", [{"type": "text", "text": text(6000, 0.2, 3000, 9000)}]
            )
            continue
        yield emit("user", "user", [{"type": "text", "text": text(200, 1.0, 5, 8000)}])
        for _ in range(rng.choice((0, 1, 1, 2, 3))):
            if seq >= count:
                break
            call = {
                "type": "tool_use",
                "id": f"t{seq}",
                "name": "shell",
                "input": {"cmd": text(60, 0.5, 5, 400)},
            }
            blocks = (
                [call]
                if rng.random() < 0.6
                else [{"type": "text", "text": text(120, 0.6, 10, 800)}, call]
            )
            yield emit("assistant", "host", blocks)
            if seq < count:
                yield emit("tool", "host", [{"type": "text", "text": text(1500, 1.1, 20, 40000)}])
        if seq < count:
            yield emit("assistant", "host", [{"type": "text", "text": text(700, 0.9, 20, 12000)}])
        if seq < count and rng.random() < 0.02:
            yield emit("user", "host", [{"type": "text", "text": text(150, 0.5, 10, 600)}])


def build(count: int, rebuild: bool):
    """The referenced session with ``count`` messages (built with COPY, or reused) and a
    current session to reference it from."""
    from django.db import connection, transaction
    from psycopg.types.json import Jsonb

    from cortex_sessions.counters import newest_conversation_text
    from cortex_sessions.models import Message, Session

    big_id = uuid.uuid5(NAMESPACE, f"big-{count}-{SEED}-v2")
    current_id = uuid.uuid5(NAMESPACE, "current")
    big = Session.objects.filter(pk=big_id).first()
    if big is not None and not rebuild and big.message_count == count:
        print(f"reusing session {big_id} ({count:,} messages)")
    else:
        Session.objects.filter(pk=big_id).delete()
        print(f"building session {big_id} with {count:,} messages (COPY) …", flush=True)
        started = time.perf_counter()
        t0 = datetime(2026, 1, 1, tzinfo=UTC)
        with transaction.atomic():
            big = Session.objects.create(
                id=big_id, agent_id=AGENT, scope=SCOPE, title="Big bench session", cwd="/srv/app"
            )
            columns = (
                "session_id, agent_id, scope, seq, role, source, content, metadata, created_at"
            )
            sql = f"COPY {Message._meta.db_table} ({columns}) FROM STDIN"
            with connection.cursor() as cursor, cursor.cursor.copy(sql) as copy:
                for seq, role, source, content in generate(count):
                    copy.write_row(
                        (
                            big_id,
                            AGENT,
                            SCOPE,
                            seq,
                            role,
                            source,
                            Jsonb(content),
                            Jsonb({}),
                            t0 + timedelta(seconds=seq),
                        )
                    )
            last = newest_conversation_text(Message.objects.filter(session=big))
            Session.objects.filter(pk=big_id).update(
                message_count=count, last_seq=count, last_message=last
            )
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM ANALYZE {Message._meta.db_table}")
            cursor.execute(f"VACUUM ANALYZE {Session._meta.db_table}")
        print(f"  built in {time.perf_counter() - started:.1f} s")
    Session.objects.get_or_create(
        id=current_id,
        defaults={"agent_id": AGENT, "scope": SCOPE, "title": "current", "cwd": "/srv/app"},
    )
    return big_id, current_id


# -- the two implementations ----------------------------------------------------------------------


def run_ours(big_id, current_id, runs: int):
    from cortex_sessions.references.service import ReadStats, prepare_references

    def once():
        stats = ReadStats()
        started = time.perf_counter()
        prepared = prepare_references(
            scope=SCOPE,
            session_id=current_id,
            content="what did we decide?",
            references=[{"session_id": str(big_id), "label": "big"}],
            read_stats=stats,
        )
        return time.perf_counter() - started, stats, prepared

    once()  # warm-up
    results = [once() for _ in range(runs)]
    times = [r[0] for r in results]
    return times, results[-1][1], results[-1][2]


def run_naive(big_id, budget: int, seconds: float | None):
    """The original algorithm, straightforwardly: load the surface, then drop the oldest message
    and re-serialize the whole snapshot until it fits (then shorten, not reached here)."""
    from django.db.models import Max

    from cortex_sessions.content import content_text
    from cortex_sessions.models import Message, Session
    from cortex_sessions.references import SourceMessage, project_surface, tag_safe_json

    started = time.perf_counter()
    session = Session.objects.get(pk=big_id)
    messages = Message.objects.filter(session_id=big_id)
    checkpoint = (
        messages.filter(role="user", source="checkpoint").aggregate(top=Max("seq"))["top"] or 0
    )
    rows = [
        SourceMessage(*row)
        for row in messages.filter(seq__gte=checkpoint)
        .order_by("seq")
        .values_list("seq", "role", "source", "content")
    ]
    surface = project_surface(rows)
    snapshot = {
        "session_id": str(big_id),
        "label": "big",
        "cwd": session.cwd,
        "captured_through_seq": max((r.seq for r in rows), default=0),
        "conversation": [m.as_entry() for m in surface],
    }
    loaded = time.perf_counter() - started
    text_bytes = sum(len(content_text(r.content).encode()) for r in rows)
    conversation = snapshot["conversation"]
    first = 1 if surface and surface[0].is_checkpoint else 0  # never drop the checkpoint

    # Exact sizes of every snapshot the loop serializes, for the extrapolation (not timed).
    costs = [len(tag_safe_json(entry).encode()) for entry in conversation]
    fixed = len(tag_safe_json({**snapshot, "conversation": []}).encode())
    sizes = []
    total = fixed + sum(costs) + max(len(costs) - 1, 0)
    index = first
    while True:
        sizes.append(total)
        if total <= budget or len(costs) - index <= 1:
            break
        total -= costs[index] + 1
        index += 1

    serialized = 0
    loop_started = time.perf_counter()
    finished = True
    drops = 0
    while True:
        size = len(tag_safe_json(snapshot).encode())
        serialized += size
        if size <= budget or len(conversation) - first <= 1:
            break
        del conversation[first]
        drops += 1
        if seconds is not None and time.perf_counter() - loop_started > seconds:
            finished = False
            break
    looped = time.perf_counter() - loop_started
    throughput = serialized / looped if looped else float("inf")
    remaining = sum(sizes[drops + 1 :]) if not finished else 0
    return {
        "load_s": loaded,
        "rows": len(rows),
        "surface": len(surface),
        "text_bytes": text_bytes,
        "needed_drops": len(sizes) - 1,
        "retained": len(costs) - (len(sizes) - 1),
        "drops": drops,
        "finished": finished,
        "measured_s": loaded + looped,
        "extrapolated_s": loaded + looped + remaining / throughput,
        "throughput": throughput,
    }


# -- main -----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--budget", type=int, default=65_536, help="MAX_REFERENCE_BYTES")
    parser.add_argument("--naive-seconds", type=float, default=120.0)
    parser.add_argument("--naive-full", action="store_true", help="run the naive loop to the end")
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args()

    url = os.environ.get("BENCH_DATABASE_URL") or DEFAULT_URL
    setup_django(url, args.budget)
    from django.db import connection

    big_id, current_id = build(args.messages, args.rebuild)
    with connection.cursor() as cursor:
        cursor.execute("SELECT version()")
        version = cursor.fetchone()[0].split(",")[0]
        cursor.execute(
            "SELECT pg_size_pretty(sum(pg_column_size(content))) FROM cortex_sessions_message "
            "WHERE session_id = %s",
            [big_id],
        )
        content_size = cursor.fetchone()[0]
        cursor.execute(
            "SELECT max(seq) FROM cortex_sessions_message "
            "WHERE session_id = %s AND role = 'user' AND source = 'checkpoint'",
            [big_id],
        )
        checkpoint_seq = cursor.fetchone()[0]
    print(f"\n{version}; budget MAX_REFERENCE_BYTES = {args.budget:,} bytes")
    print(
        f"referenced session: {args.messages:,} messages, {content_size} of stored content, "
        f"newest checkpoint at seq {checkpoint_seq or 0:,}"
    )

    times, stats, prepared = run_ours(big_id, current_id, args.runs)
    ours = statistics.median(times)
    reference = prepared.contexts[0]["source"]["references"][0]
    print(
        f"\nprepare_references, median of {args.runs}: {ours * 1000:.1f} ms "
        f"(min {min(times) * 1000:.1f}, max {max(times) * 1000:.1f})"
    )
    print(
        f"  rows read: {stats.rows:,}; text bytes read: {stats.text_bytes:,} "
        f"({stats.text_bytes / args.budget:.2f}x the budget); message queries: {stats.queries}"
    )
    print(
        f"  snapshot: {reference['retained_messages']:,} of {reference['original_messages']:,} "
        f"window messages retained, omitted_bytes {reference['omitted_bytes']}, "
        f"compacted {reference['compacted']}"
    )

    naive = run_naive(big_id, args.budget, None if args.naive_full else args.naive_seconds)
    print("\nnaive original (load the surface, re-serialize after every dropped message):")
    print(
        f"  load + project: {naive['load_s']:.2f} s; rows read {naive['rows']:,}; "
        f"text bytes read {naive['text_bytes']:,}; surface {naive['surface']:,} messages"
    )
    print(
        f"  drops: {naive['drops']:,} of {naive['needed_drops']:,} needed; serializing at "
        f"{naive['throughput'] / 1e6:.0f} MB/s"
    )
    print(
        f"  it keeps {naive['retained']:,} messages; prepare_references kept "
        f"{reference['retained_messages']:,}"
        + (" (same)" if naive["retained"] == reference["retained_messages"] else " (DIFFERENT)")
    )
    if naive["finished"]:
        print(f"  total: {naive['measured_s']:.2f} s")
        print(f"\nratio: {naive['measured_s'] / ours:,.0f}x faster")
    else:
        print(
            f"  stopped after {naive['measured_s']:.1f} s (--naive-seconds); extrapolated "
            f"total {naive['extrapolated_s']:,.0f} s ({naive['extrapolated_s'] / 3600:.1f} h)"
        )
        print(
            f"\nratio: >= {naive['measured_s'] / ours:,.0f}x faster (measured lower bound); "
            f"~{naive['extrapolated_s'] / ours:,.0f}x extrapolated"
        )
    within = stats.text_bytes <= 2 * args.budget
    print(
        f"target: >= 100x and text read <= 2x budget: "
        f"{'met' if naive['measured_s'] / ours >= 100 and within else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
