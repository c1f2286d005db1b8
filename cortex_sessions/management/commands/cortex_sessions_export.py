"""``manage.py cortex_sessions_export``: write sessions as a conversation file.

The work is done by :func:`cortex_sessions.transfer.export_conversations`, which streams; this
command writes its output to stdout or ``--output``.
"""

from __future__ import annotations

import codecs
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Count
from django.utils.translation import ngettext

from cortex_sessions import routing
from cortex_sessions.consistency import primary_reads
from cortex_sessions.exceptions import InvalidInput, ScopeError
from cortex_sessions.models import Session
from cortex_sessions.scope import as_scope
from cortex_sessions.services import check_agent_id
from cortex_sessions.transfer import export_conversations


def _takes_utf8(stream: Any) -> bool:
    encoding = getattr(stream, "encoding", None)
    if not encoding:  # an in-memory text stream takes any character
        return True
    try:
        return codecs.lookup(encoding).name == "utf-8"
    except LookupError:
        return False


class Command(BaseCommand):
    help = (
        "Write the sessions at a scope (and beneath it, unless --exact) as JSON Lines, one "
        "conversation per line, in the format cortex_sessions_import reads."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--scope", required=True, help="Canonical scope whose sessions are exported."
        )
        parser.add_argument("--agent-id", help="Only this agent's sessions.")
        parser.add_argument(
            "--exact", action="store_true", help="Only sessions stored at the scope itself."
        )
        parser.add_argument("--output", "-o", help="Write to this file (UTF-8) instead of stdout.")

    @primary_reads()  # read what the primary has (docs/design.md §17.2)
    def handle(self, *args: Any, **options: Any) -> None:
        try:
            as_scope(options["scope"])
        except ScopeError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from exc
        if options["agent_id"] is not None:
            try:
                check_agent_id(options["agent_id"])
            except InvalidInput as exc:  # InvalidAgentId, NulCharacter, InvalidText
                raise CommandError(f"{exc.code}: {exc.message}") from exc
        self._warn_if_mixed(options)
        path = options["output"]
        if path:
            try:
                with open(path, "w", encoding="utf-8") as out:
                    self._export(options, out.write, ensure_ascii=False)
            except OSError as exc:
                raise CommandError(f"Cannot write {path}: {exc.strerror}.") from exc
        else:
            self._export(
                options,
                lambda piece: self.stdout.write(piece, ending=""),
                ensure_ascii=not _takes_utf8(self.stdout),
            )

    def _warn_if_mixed(self, options: dict[str, Any]) -> None:
        """Warn when the selection spans several agents or scopes: the file carries neither,
        and ``cortex_sessions_import`` puts every line under one ``--agent-id`` and ``--scope``."""
        using = routing.db_for_read(Session, scope=options["scope"])  # docs/design.md §17.1
        sessions = Session.objects.using(using).within(options["scope"], exact=options["exact"])
        if options["agent_id"] is not None:
            sessions = sessions.filter(agent_id=options["agent_id"])
        spread = sessions.aggregate(
            agents=Count("agent_id", distinct=True), scopes=Count("scope", distinct=True)
        )
        if spread["agents"] > 1 or spread["scopes"] > 1:
            agents = ngettext("%(n)d agent", "%(n)d agents", spread["agents"]) % {
                "n": spread["agents"]
            }
            scopes = ngettext("%(n)d scope", "%(n)d scopes", spread["scopes"]) % {
                "n": spread["scopes"]
            }
            self.stderr.write(
                f"Warning: these sessions belong to {agents} and {scopes}. The file records "
                "neither, and an import puts every conversation under one --agent-id and "
                "--scope; export with --agent-id and --exact to keep them apart."
            )

    @staticmethod
    def _export(options: dict[str, Any], write: Any, *, ensure_ascii: bool) -> None:
        for piece in export_conversations(
            scope=options["scope"],
            agent_id=options["agent_id"],
            exact=options["exact"],
            ensure_ascii=ensure_ascii,
        ):
            write(piece)
