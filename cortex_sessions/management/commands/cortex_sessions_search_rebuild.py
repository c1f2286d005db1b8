"""``manage.py cortex_sessions_search_rebuild``: rebuild the message search column and indexes
for the configured ``SEARCH_CONFIG`` (docs/design.md §11.5, docs/search.md).

The configuration is part of the column's generation expression, so changing the setting needs
the column built again: in one transaction the column is dropped and added back (a rewrite of
the message table under an ``ACCESS EXCLUSIVE`` lock, as in migration ``0012``), then the GIN
indexes are built concurrently. Until the message index is built, searches work but read the
table; the title index is replaced only once its successor is built.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, connections, transaction

from cortex_sessions import search
from cortex_sessions.conf import app_settings
from cortex_sessions.consistency import primary_reads


class Command(BaseCommand):
    help = (
        "Rebuild the PostgreSQL message search column and its GIN indexes for "
        "CORTEX_SESSIONS['SEARCH_CONFIG'] (after changing it). Rewrites the message table."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--database", default=DEFAULT_DB_ALIAS, help="Database alias.")
        parser.add_argument(
            "--dry-run", action="store_true", help="Print the SQL without running it."
        )

    @primary_reads()  # read what the primary has (docs/design.md §17.2)
    def handle(self, *args: Any, **options: Any) -> None:
        connection = connections[options["database"]]
        if connection.vendor != "postgresql":
            self.stdout.write(
                f"Nothing to rebuild: message search on {connection.vendor} has no index."
            )
            return
        config = app_settings.SEARCH_CONFIG
        try:
            search.config_sql(config)
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        if not search.config_exists(connection, config):
            raise CommandError(f"PostgreSQL has no text search configuration {config!r}.")
        installed = search.installed_config(connection)
        self.stdout.write(f"Search column built with {installed!r}; rebuilding with {config!r}.")
        replace = [
            f'ALTER TABLE "{search.MESSAGE_TABLE}" DROP COLUMN IF EXISTS "{search.SEARCH_COLUMN}"',
            search.add_column_statement(config),
        ]
        new_title = f"{search.TITLE_INDEX}_new"
        message_index, title_index = search.create_index_statements(config)
        steps: list[tuple[str, list[str]]] = [
            ("column (rewrites the message table)", replace),
            ("message index (concurrently)", [message_index]),
            (
                "title index (concurrently)",
                [
                    f'DROP INDEX CONCURRENTLY IF EXISTS "{new_title}"',
                    title_index.replace(f'"{search.TITLE_INDEX}"', f'"{new_title}"'),
                ],
            ),
            (
                "title index swap",
                [
                    f'DROP INDEX IF EXISTS "{search.TITLE_INDEX}"',
                    f'ALTER INDEX "{new_title}" RENAME TO "{search.TITLE_INDEX}"',
                ],
            ),
        ]
        for label, statements in steps:
            if options["dry_run"]:
                for statement in statements:
                    self.stdout.write(f"{statement};")
                continue
            started = time.perf_counter()
            atomic = "CONCURRENTLY" not in statements[-1]
            with (
                transaction.atomic(using=connection.alias) if atomic else nullcontext(),
                connection.cursor() as cursor,
            ):
                for statement in statements:
                    cursor.execute(statement)
            self.stdout.write(f"  {label}: {time.perf_counter() - started:.1f} s")
        if not options["dry_run"]:
            self.stdout.write(f"Message search now uses {search.installed_config(connection)!r}.")
