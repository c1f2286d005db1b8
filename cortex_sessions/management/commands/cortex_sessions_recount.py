"""``manage.py cortex_sessions_recount``: verify counters against rows, repair drift (docs/design.md §5)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from cortex_sessions.consistency import primary_reads
from cortex_sessions.exceptions import ScopeError
from cortex_sessions.services import recount_sessions


class Command(BaseCommand):
    help = (
        "Check message_count, last_message and the usage totals (input_tokens, output_tokens, "
        "cost, context_tokens) of sessions against their message rows and repair any drift, "
        "printing each session fixed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--scope", help="Check sessions at and beneath this canonical scope.")
        target.add_argument("--all", action="store_true", help="Check every session.")
        parser.add_argument(
            "--dry-run", action="store_true", help="Report drift without repairing it."
        )

    @primary_reads()  # read what the primary has (docs/design.md §17.2)
    def handle(self, *args: Any, **options: Any) -> None:
        try:
            drifts = recount_sessions(
                scope=options["scope"],
                all_scopes=options["all"],
                repair=not options["dry_run"],
            )
        except ScopeError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from exc
        verb = "would fix" if options["dry_run"] else "fixed"
        for drift in drifts:
            self.stdout.write(
                f"{drift.session_id}: message_count {drift.stored_count} -> {drift.actual_count}"
                + (
                    ", last_message updated"
                    if drift.stored_last_message != drift.actual_last_message
                    else ""
                )
                + "".join(
                    f", {name} {getattr(drift.stored_totals, name)} -> "
                    f"{getattr(drift.actual_totals, name)}"
                    for name in drift.drifted_totals
                )
                + f" ({verb})"
            )
        self.stdout.write(
            self.style.SUCCESS(
                f"{len(drifts)} session(s) with drifted counters "
                + ("found; none repaired (dry run)." if options["dry_run"] else "fixed.")
            )
        )
