"""Message search (docs/design.md §11.5): on PostgreSQL, a stored generated ``tsvector`` of
each conversation message's text, ``cortex_sessions_message.search_vector``, with a GIN index,
and a GIN expression index on the ``tsvector`` of session titles. SQLite searches by substring
and MySQL/MariaDB not at all, so on them this migration does nothing.

The column is not a model field (see :mod:`cortex_sessions.search`), so the operations change
the schema and never the migration state. The text search configuration is
``CORTEX_SESSIONS["SEARCH_CONFIG"]`` (default ``simple``) when the migration runs; change it later
with ``manage.py cortex_sessions_search_rebuild``.

Locking (PostgreSQL). The migration is not atomic, so each step holds its locks only for itself:
1. ``ALTER TABLE … ADD COLUMN … GENERATED ALWAYS AS (…) STORED`` rewrites the message table,
   computing the vector of every row, under an ``ACCESS EXCLUSIVE`` lock: reads and writes of
   messages wait for it. Measured on this project's bench data with a write probe
   (docs/performance.md, "Message search"; a loaded 2-core machine): 16 s at ``small``
   (151,656 messages) and 558 s at ``large`` (5,100,000 messages, 4.2 GB), about 9,000 rows/s.
   PostgreSQL cannot add a stored generated column without that rewrite. Run it
   with a ``lock_timeout`` (``PGOPTIONS='-c lock_timeout=5s' manage.py migrate``) so it never
   queues behind a long transaction while holding up everything behind it.
2. ``CREATE INDEX CONCURRENTLY`` of both GIN indexes: writes go on while they build (about
   160 s at ``large``). A build that failed leaves an ``INVALID`` index, which the next run
   drops and builds again.

Backward: the indexes are dropped concurrently, then the column (a catalogue change, no rewrite).
"""

from __future__ import annotations

from django.db import migrations

from cortex_sessions.migrations._operations import MessageSearchSchema


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY runs outside a transaction

    dependencies = [
        ("cortex_sessions", "0011_session_lifecycle"),
    ]

    operations = [MessageSearchSchema()]
