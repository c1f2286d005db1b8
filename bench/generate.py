"""Fill a PostgreSQL database with sessions and messages at a chosen scale, with COPY.

``small``: 10,000 sessions over 100 three-level scopes and 10 agents, ~50,000 messages.
``large``: 1,000,000 sessions over 10,000 three-level scopes and 100 agents, ~5,000,000 messages.

Both scales also get one session of 100,000 messages (the "newest 50" benchmark) and one of
``peer_messages`` messages (the size the peer stores are seeded to). Rows are produced in chunks
and streamed with ``COPY`` over two connections (sessions and messages), with the tables'
secondary indexes dropped during the load and rebuilt after, so memory stays bounded by a chunk
and nothing goes through ``Model.save()``. Counters (``message_count``, ``last_seq``,
``last_message``) are consistent with the rows, as the app would have written them.

The legacy data of the backfill benchmark (messages without a session, docs/design.md §4) is written
by :func:`load_legacy`.

Usage: ``python -m bench.generate --scale small`` (``python -m bench`` calls it when needed).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import psycopg

from cortex_sessions.content import preview
from cortex_sessions.tokens import count_tokens

from .db import create_database, database_url, drop_secondary_indexes, restore_indexes

__all__ = ["BIG_SESSION_TITLE", "PEER_SESSION_TITLE", "SCALES", "Scale", "generate", "load_legacy"]

SESSION_TABLE = "cortex_sessions_session"
MESSAGE_TABLE = "cortex_sessions_message"
SESSION_COLUMNS = (
    "id, agent_id, scope, title, metadata, cwd, message_count, last_message, last_seq, "
    "is_default, backfilled_by, created_at, updated_at, input_tokens, output_tokens, cost, "
    "context_tokens, legal_hold"
)
MESSAGE_COLUMNS = (
    "session_id, agent_id, scope, seq, role, source, content, metadata, created_at, token_count"
)
LEGACY_COLUMNS = "agent_id, scope, role, source, content, metadata, created_at, token_count"
BIG_SESSION_TITLE = "bench: big session"
PEER_SESSION_TITLE = "bench: peer-size session"
CHUNK_SESSIONS = 5_000
PREVIEW_CHARS = 280
EPOCH = datetime(2025, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Scale:
    """The shape of one data set."""

    name: str
    orgs: int
    projects: int  # per org
    users: int  # per project
    agents: int
    agents_per_scope: int
    sessions: int
    messages: int  # average total; per-session counts are random around sessions/messages
    big_session_messages: int
    peer_messages: int
    backfill_sizes: tuple[int, ...]
    reps: int
    #: Appends of the heavy run after which the prefix plans are shown again.
    heavy_appends: int = 75_000

    @property
    def scopes(self) -> int:
        """Number of three-level (leaf) scopes."""
        return self.orgs * self.projects * self.users

    @property
    def database(self) -> str:
        """Name of the database of this scale: ``<BENCH_DB_PREFIX>_<scale>`` (default prefix
        ``cortex_bench``)."""
        return f"{os.environ.get('BENCH_DB_PREFIX', 'cortex_bench')}_{self.name}"


SCALES = {
    "small": Scale(
        name="small",
        orgs=5,
        projects=4,
        users=5,
        agents=10,
        agents_per_scope=5,
        sessions=10_000,
        messages=50_000,
        big_session_messages=100_000,
        peer_messages=1_000,
        backfill_sizes=(10_000, 100_000),
        reps=30,
    ),
    "large": Scale(
        name="large",
        orgs=10,
        projects=10,
        users=100,
        agents=100,
        agents_per_scope=10,
        sessions=1_000_000,
        messages=5_000_000,
        big_session_messages=100_000,
        peer_messages=10_000,
        backfill_sizes=(10_000, 100_000, 1_000_000),
        reps=15,
    ),
}

_WORDS = [
    "the",
    "session",
    "agent",
    "scope",
    "message",
    "model",
    "query",
    "index",
    "database",
    "request",
    "response",
    "tool",
    "call",
    "result",
    "user",
    "assistant",
    "refactor",
    "billing",
    "module",
    "test",
    "suite",
    "deploy",
    "release",
    "branch",
    "merge",
    "review",
    "migration",
    "backfill",
    "counter",
    "preview",
    "default",
    "thread",
    "project",
    "workspace",
    "config",
    "error",
    "retry",
    "timeout",
    "cache",
    "latency",
    "throughput",
    "memory",
    "page",
    "filter",
    "search",
    "order",
    "limit",
    "offset",
    "python",
    "django",
    "postgres",
    "schema",
    "field",
    "value",
    "list",
    "count",
    "append",
    "read",
    "write",
    "lock",
    "commit",
]


def _corpus(seed: int = 7, size: int = 200_000) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(_WORDS) for _ in range(size // 6))


CORPUS = _corpus()


def text_of_length(rng: random.Random, length: int) -> str:
    """A slice of English-like text of about ``length`` characters."""
    length = max(1, min(length, len(CORPUS) - 1))
    start = rng.randrange(0, len(CORPUS) - length)
    return CORPUS[start : start + length].strip() or "ok"


def message_length(rng: random.Random, role: str) -> int:
    """Realistic lengths: short user turns, longer assistant answers, long-tailed tool output."""
    median = {"user": 80, "assistant": 400, "tool": 600}[role]
    return min(int(rng.lognormvariate(0, 1.0) * median) + 1, 16_000)


def scope_of(index: int, scale: Scale) -> str:
    """The canonical three-level scope number ``index`` (0 ≤ index < scale.scopes)."""
    user = index % scale.users
    project = (index // scale.users) % scale.projects
    org = index // (scale.users * scale.projects)
    return f"org=o{org}/project=p{project}/user=u{user}"


def agent_of(scope_index: int, pick: int, scale: Scale) -> str:
    """Agent ``pick`` (0 ≤ pick < agents_per_scope) of a scope; scopes use a few agents each."""
    return f"agent-{(scope_index * 7 + pick * 13) % scale.agents:03d}"


def _conversation(
    rng: random.Random, count: int, start: datetime
) -> Iterator[tuple[int, str, str, str, datetime]]:
    """``count`` messages: ``(seq, role, source, text, created_at)``; user/assistant turns with
    an occasional tool result."""
    moment = start
    for seq in range(1, count + 1):
        if seq % 2 == 1:
            role, source = "user", "user"
        elif seq % 10 == 0:
            role, source = "tool", "host"
        else:
            role, source = "assistant", "host"
        moment += timedelta(seconds=rng.randint(1, 120))
        yield seq, role, source, text_of_length(rng, message_length(rng, role)), moment


def _content(text: str) -> str:
    return json.dumps([{"type": "text", "text": text}])


def _session_rows(scale: Scale, seed: int) -> Iterator[tuple[tuple, list[tuple]]]:
    """Yield ``(session_row, message_rows)`` for every generated session, deterministically."""
    rng = random.Random(seed)
    average = scale.messages / scale.sessions
    defaults: set[tuple[str, str]] = set()
    for number in range(scale.sessions):
        scope_index = rng.randrange(scale.scopes)
        scope = scope_of(scope_index, scale)
        agent = agent_of(scope_index, rng.randrange(scale.agents_per_scope), scale)
        created = EPOCH + timedelta(seconds=number * 30 + rng.randint(0, 29))
        count = rng.randint(0, int(2 * average))
        yield _session(rng, number, agent, scope, created, count, defaults)


def _session(
    rng: random.Random,
    number: int,
    agent: str,
    scope: str,
    created: datetime,
    count: int,
    defaults: set[tuple[str, str]],
    title: str | None = None,
) -> tuple[tuple, list[tuple]]:
    session_id = uuid.UUID(int=(int(created.timestamp() * 1000) << 80) | (7 << 76) | number)
    messages = []
    last_text = ""
    updated = created
    context_tokens = 0
    for seq, role, source, text, moment in _conversation(rng, count, created):
        tokens = count_tokens(role, [{"type": "text", "text": text}])
        context_tokens += tokens
        messages.append(
            (session_id, agent, scope, seq, role, source, _content(text), "{}", moment, tokens)
        )
        if role in ("user", "assistant"):
            last_text = text
        updated = moment
    is_default = (agent, scope) not in defaults and title is None
    if is_default:
        defaults.add((agent, scope))
    words = rng.sample(_WORDS, 3)
    row = (
        session_id,
        agent,
        scope,
        title if title is not None else f"{' '.join(words).capitalize()} #{number}",
        "{}",
        f"/home/dev/{words[0]}" if number % 3 else None,
        count,
        preview(last_text, PREVIEW_CHARS) if last_text else "",
        count,
        is_default,
        "",
        created,
        updated,
        0,
        0,
        0,
        context_tokens,
        False,
    )
    return row, messages


def _special_sessions(scale: Scale) -> Iterator[tuple[tuple, list[tuple]]]:
    rng = random.Random(99)
    scope = scope_of(0, scale)
    agent = agent_of(0, 0, scale)
    created = EPOCH - timedelta(days=30)
    yield _session(
        rng, 0, agent, scope, created, scale.big_session_messages, set(), BIG_SESSION_TITLE
    )
    yield _session(rng, 1, agent, scope, created, scale.peer_messages, set(), PEER_SESSION_TITLE)


def generate(scale: Scale, *, migrate: bool = True, say=print) -> dict:
    """(Re)create the scale's database, migrate it and load it with COPY.

    Returns:
        Counts and timings of the load.
    """
    create_database(scale.database, recreate=True)
    if migrate:
        _migrate()
    url = database_url(scale.database)
    started = time.perf_counter()
    sessions = messages = 0
    with psycopg.connect(url) as s_conn, psycopg.connect(url) as m_conn:
        restore = drop_secondary_indexes(m_conn, MESSAGE_TABLE)
        m_conn.commit()  # the FK drop locks both tables: commit before the other connection
        restore_s = drop_secondary_indexes(s_conn, SESSION_TABLE)
        s_conn.commit()
        with (
            s_conn.cursor().copy(f"COPY {SESSION_TABLE} ({SESSION_COLUMNS}) FROM STDIN") as s_copy,
            m_conn.cursor().copy(f"COPY {MESSAGE_TABLE} ({MESSAGE_COLUMNS}) FROM STDIN") as m_copy,
        ):
            for row, rows in _chain(_special_sessions(scale), _session_rows(scale, seed=1)):
                s_copy.write_row(row)
                for message in rows:
                    m_copy.write_row(message)
                sessions += 1
                messages += len(rows)
                if sessions % 100_000 == 0:
                    say(f"  {sessions:,} sessions, {messages:,} messages")
        s_conn.commit()
        m_conn.commit()
        loaded = time.perf_counter()
        say(f"  COPY done in {loaded - started:.0f}s; rebuilding indexes")
        restore_indexes(s_conn, restore_s)
        s_conn.commit()
        restore_indexes(m_conn, restore)
        m_conn.commit()
    _vacuum(url, (SESSION_TABLE, MESSAGE_TABLE))
    done = time.perf_counter()
    return {
        "sessions": sessions,
        "messages": messages,
        "copy_seconds": round(loaded - started, 1),
        "index_seconds": round(done - loaded, 1),
    }


def _chain(*iterables):
    for iterable in iterables:
        yield from iterable


def _vacuum(url: str, tables: tuple[str, ...]) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for table in tables:
            conn.execute(f"VACUUM (ANALYZE) {table}")


def _migrate() -> None:
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def load_legacy(url: str, *, rows: int, per_pair: int = 100, default_share: int = 10) -> dict:
    """Empty the tables of ``url`` and load ``rows`` legacy messages (no session, no seq).

    Rows are spread over ``rows // per_pair`` ``(agent_id, scope)`` pairs, interleaved by time
    as a message log would be; one pair in ``default_share`` already has an (empty) default
    session, so both backfill paths run.

    Returns:
        ``{"rows", "pairs", "existing_defaults"}``.
    """
    pairs = max(1, rows // per_pair)
    rng = random.Random(5)
    existing = 0
    with psycopg.connect(url) as conn:
        # CASCADE: tables of later migrations (imported conversations) refer to sessions.
        conn.execute(f"TRUNCATE {MESSAGE_TABLE}, {SESSION_TABLE} RESTART IDENTITY CASCADE")
        restore = drop_secondary_indexes(conn, MESSAGE_TABLE)
        with conn.cursor().copy(f"COPY {SESSION_TABLE} ({SESSION_COLUMNS}) FROM STDIN") as copy:
            for pair in range(0, pairs, default_share):
                agent, scope = _legacy_pair(pair)
                row = (uuid.uuid4(), agent, scope, "Default", "{}", None, 0, "", 0, True, "")
                copy.write_row((*row, EPOCH, EPOCH, 0, 0, 0, 0, False))
                existing += 1
        with conn.cursor().copy(f"COPY {MESSAGE_TABLE} ({LEGACY_COLUMNS}) FROM STDIN") as copy:
            moment = EPOCH
            for number in range(rows):
                agent, scope = _legacy_pair(number % pairs)
                role = "user" if (number // pairs) % 2 == 0 else "assistant"
                text = text_of_length(rng, message_length(rng, role))
                moment += timedelta(milliseconds=rng.randint(1, 2000))
                source = "user" if role == "user" else "host"
                tokens = count_tokens(role, [{"type": "text", "text": text}])
                copy.write_row((agent, scope, role, source, _content(text), "{}", moment, tokens))
        restore_indexes(conn, restore)
        conn.commit()
    _vacuum(url, (SESSION_TABLE, MESSAGE_TABLE))
    return {"rows": rows, "pairs": pairs, "existing_defaults": existing}


def _legacy_pair(pair: int) -> tuple[str, str]:
    return f"legacy-agent-{pair % 50:02d}", f"org=legacy/project=p{pair % 97}/user=u{pair}"


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m bench.generate --scale small|large``."""
    from .setup import setup_django

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="small")
    args = parser.parse_args(argv)
    scale = SCALES[args.scale]
    setup_django(database_url(scale.database))
    print(json.dumps(generate(scale), indent=2))


if __name__ == "__main__":
    main()
