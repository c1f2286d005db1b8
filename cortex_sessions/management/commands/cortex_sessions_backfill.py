"""``manage.py cortex_sessions_backfill``: the default-session backfill of migration 0003 (§4)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS

from cortex_sessions.backfill import DEFAULT_BATCH_SIZE, backfill_default_sessions
from cortex_sessions.consistency import primary_reads
from cortex_sessions.models import Message, Session


class Command(BaseCommand):
    help = (
        "Give every (agent_id, scope) whose messages have no session its default session, "
        "as migration 0003 does. Idempotent; safe to re-run."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dry-run", action="store_true", help="Report what would be done; write nothing."
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=DEFAULT_BATCH_SIZE,
            help=f"Messages per transaction and pairs per page (default {DEFAULT_BATCH_SIZE}).",
        )
        parser.add_argument("--database", default=DEFAULT_DB_ALIAS, help="Database alias.")

    @primary_reads()  # read what the primary has (docs/design.md §17.2)
    def handle(self, *args: Any, **options: Any) -> None:
        if options["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1.")
        verbosity = options["verbosity"]
        report = backfill_default_sessions(
            session_model=Session,
            message_model=Message,
            using=options["database"],
            batch_size=options["batch_size"],
            dry_run=options["dry_run"],
            progress=(lambda line: self.stdout.write(line)) if verbosity >= 1 else None,
        )
        verb = "Would attach" if options["dry_run"] else "Attached"
        self.stdout.write(
            self.style.SUCCESS(
                f"{verb} {report.messages_attached} messages for {report.pairs} agent/scope "
                f"pairs; {report.sessions_created} default sessions "
                f"{'would be ' if options['dry_run'] else ''}created."
            )
        )
