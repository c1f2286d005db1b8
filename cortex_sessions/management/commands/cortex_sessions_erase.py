"""``manage.py cortex_sessions_erase``: erase every session of a scope (docs/design.md §18.2).

The work is :func:`cortex_sessions.services.erasure.erase_scope` (or
:func:`~cortex_sessions.services.erasure.resume_erasure` with ``--resume``); this command prints the
record's id first, so a run that is killed can be resumed, then progress and the counts.
"""

from __future__ import annotations

import getpass
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from cortex_sessions.consistency import primary_reads
from cortex_sessions.exceptions import CortexSessionsError
from cortex_sessions.models import Erasure
from cortex_sessions.services.erasure import ERASURE_BATCH, erase_scope, resume_erasure


def _operator() -> str:
    """``cli:<login name>`` for the record's ``requested_by`` (``cli`` when there is none)."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no user name in the environment or the password database
        return "cli"


class Command(BaseCommand):
    help = (
        "Delete every session at or beneath a scope and every row tied to it (messages, "
        "import records, Idempotency-Key records, the integrations' rows), in bounded "
        "transactions, skipping sessions on legal hold. Prints the erasure's id first: a run "
        "that is interrupted is finished with --resume ID."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--scope", help="Canonical scope to erase (never empty).")
        target.add_argument("--resume", metavar="ID", help="Finish the erasure with this id.")
        parser.add_argument(
            "--dry-run", action="store_true", help="Only print what would be deleted."
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=ERASURE_BATCH,
            help=f"Rows (or sessions) per transaction (default {ERASURE_BATCH}).",
        )

    @primary_reads()  # read what the primary has (docs/design.md §17.2)
    def handle(self, *args: Any, **options: Any) -> None:
        verbosity = options["verbosity"]
        started = False

        def on_batch(erasure: Erasure) -> None:
            nonlocal started
            if not started:
                started = True
                self.stdout.write(f"Erasure {erasure.pk} of {erasure.scope}")
            if verbosity >= 2:
                self.stdout.write(f"... {self._counts(erasure)}")
            self.stdout.flush()

        try:
            if options["dry_run"]:
                if options["resume"]:
                    raise CommandError("--dry-run takes --scope, not --resume.")
                erasure = erase_scope(
                    scope=options["scope"], dry_run=True, batch_size=options["batch_size"]
                )
                self.stdout.write(
                    f"Would delete from {erasure.scope}: {self._counts(erasure)}; "
                    f"{erasure.skipped_held} session(s) on legal hold would be kept."
                )
                return
            if options["resume"]:
                erasure = resume_erasure(
                    erasure_id=options["resume"],
                    batch_size=options["batch_size"],
                    on_batch=on_batch,
                )
            else:
                erasure = erase_scope(
                    scope=options["scope"],
                    requested_by=_operator(),
                    batch_size=options["batch_size"],
                    on_batch=on_batch,
                )
        except CortexSessionsError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from exc
        self.stdout.write(
            self.style.SUCCESS(
                f"Erasure {erasure.pk} done: deleted {self._counts(erasure)}; "
                f"{erasure.skipped_held} session(s) on legal hold kept."
            )
        )

    @staticmethod
    def _counts(erasure: Erasure) -> str:
        return json.dumps(dict(sorted(erasure.counts.items())), separators=(", ", ": "))
