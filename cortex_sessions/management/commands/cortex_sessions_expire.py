"""``manage.py cortex_sessions_expire [--dry-run] [--batch-size N]``: delete the expired sessions
and apply the ``RETENTION`` policies (docs/design.md §18.1)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from cortex_sessions.consistency import primary_reads
from cortex_sessions.exceptions import InvalidInput
from cortex_sessions.retention import PolicyError
from cortex_sessions.services import DEFAULT_BATCH_SIZE, expire_sessions


class Command(BaseCommand):
    help = (
        "Delete the sessions whose expires_at has passed and apply the RETENTION policies, in "
        "batches of one short transaction each. Sessions on legal hold are never deleted. Safe "
        "to run from several workers at once and to kill: a rerun finishes the rest. Run it "
        "from cron."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Count what is due (and what is held) without changing anything.",
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=DEFAULT_BATCH_SIZE,
            help=f"Sessions per batch and transaction (default {DEFAULT_BATCH_SIZE}).",
        )

    @primary_reads()  # read what the primary has (docs/design.md §17.2)
    def handle(self, *args: Any, **options: Any) -> None:
        def progress(line: str) -> None:
            self.stdout.write(line)
            self.stdout.flush()

        try:
            report = expire_sessions(
                batch_size=options["batch_size"], dry_run=options["dry_run"], progress=progress
            )
        except (InvalidInput, PolicyError) as exc:
            raise CommandError(str(exc)) from None
        verb = "Would delete" if options["dry_run"] else "Deleted"
        archive = "would archive" if options["dry_run"] else "archived"
        self.stdout.write(
            f"{verb} {report.expired} expired and {report.deleted} retained-too-long "
            f"session(s) ({report.messages} message(s)), {archive} {report.archived}; "
            f"{report.held} on legal hold kept; {report.batches} batch(es)."
        )
