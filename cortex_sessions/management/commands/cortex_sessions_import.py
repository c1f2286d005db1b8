"""``manage.py cortex_sessions_import``: import a conversation file (JSON Lines).

The work is done by :func:`cortex_sessions.transfer.import_conversations`; this command opens
the file, prints progress and errors, and turns failures into the exit status.
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from cortex_sessions.consistency import primary_reads
from cortex_sessions.exceptions import InvalidInput, ScopeError
from cortex_sessions.transfer import ImportReport, LineError, import_conversations


class PartlyImported(CommandError):
    """Some lines failed; the others were imported and the summary has been printed.

    ``manage.py`` exits with status 1 without repeating the summary as a "CommandError:" line;
    a caller of ``call_command`` catches it as the :class:`CommandError` it is, its message the
    summary.
    """


class Command(BaseCommand):
    #: Set by :meth:`run_from_argv`: the command runs as ``manage.py``, not ``call_command``.
    from_command_line = False

    help = (
        "Import conversations from a JSON Lines file (one conversation per line; '-' reads "
        "stdin) as sessions of one agent at one scope. Each conversation is imported whole or "
        "not at all; conversations whose id was already imported for the agent and scope are "
        "skipped. Bad lines are reported with their line number and the import continues; the "
        "command then exits with status 1."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="Path of the JSON Lines file, or '-' for stdin.")
        parser.add_argument("--agent-id", required=True, help="Agent of the imported sessions.")
        parser.add_argument(
            "--scope", required=True, help="Canonical scope the sessions are created at."
        )
        parser.add_argument(
            "--progress-every",
            type=int,
            default=500,
            help="Print progress every N lines (default 500; 0 disables).",
        )

    def run_from_argv(self, argv: list[str]) -> None:
        """Run as ``manage.py cortex_sessions_import``; a partial import exits with status 1."""
        self.from_command_line = True
        super().run_from_argv(argv)

    def execute(self, *args: Any, **options: Any) -> str | None:
        """Django's ``execute``; from the command line a :class:`PartlyImported` is only the
        exit status, since its summary is already printed."""
        try:
            return super().execute(*args, **options)
        except PartlyImported as exc:
            if not self.from_command_line or options.get("traceback"):
                raise
            sys.exit(exc.returncode)

    @primary_reads()  # read what the primary has (docs/design.md §17.2)
    def handle(self, *args: Any, **options: Any) -> None:
        if options["progress_every"] < 0:
            raise CommandError("--progress-every must not be negative.")
        verbosity = options["verbosity"]

        def on_error(error: LineError) -> None:
            self.stderr.write(str(error))

        def on_progress(report: ImportReport) -> None:
            self.stderr.write(f"... {self._summary(report)}")

        path = options["file"]
        try:
            stream = getattr(sys.stdin, "buffer", sys.stdin) if path == "-" else open(path, "rb")  # noqa: SIM115
        except OSError as exc:
            raise CommandError(f"Cannot read {path}: {exc.strerror}.") from exc
        try:
            report = import_conversations(
                stream,
                scope=options["scope"],
                agent_id=options["agent_id"],
                on_error=on_error,
                on_progress=on_progress if verbosity >= 1 else None,
                progress_every=options["progress_every"],
            )
        except (ScopeError, InvalidInput) as exc:  # InvalidAgentId, NulCharacter, InvalidText
            raise CommandError(f"{exc.code}: {exc.message}") from exc
        finally:
            if path != "-":
                stream.close()
        if report.failed:
            summary = (
                f"{self._summary(report)}. The failed line(s) are listed above; the other "
                "lines were imported."
            )
            self.stderr.write(summary, self.style.ERROR)
            raise PartlyImported(summary)
        if verbosity >= 1:
            self.stdout.write(self.style.SUCCESS(f"{self._summary(report)}."))

    @staticmethod
    def _summary(report: ImportReport) -> str:
        return (
            f"{report.lines} line(s): {report.imported} imported ({report.messages} messages), "
            f"{report.skipped} skipped as already imported, {report.failed} failed"
        )
