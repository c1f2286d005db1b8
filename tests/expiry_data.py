"""Data for the expiry sweep's kill test on SQLite, whose test database (in memory) a child
process cannot see (docs/design.md §18.1): ``python -m tests.expiry_data migrate|populate|state``
against the database of ``DATABASE_URL`` (a file).
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta

SCOPE = "org=acme/user=1"


def populate(expired: int) -> dict[str, list[str]]:
    """``expired`` expired sessions of one message each, one expired session on legal hold and
    one live session; their ids by kind."""
    from django.utils import timezone

    from cortex_sessions import services
    from cortex_sessions.models import Session

    ids: dict[str, list[str]] = {"expired": [], "held": [], "live": []}
    for kind, count in (("expired", expired), ("held", 1), ("live", 1)):
        for _ in range(count):
            session = services.create_session(scope=SCOPE, agent_id="a")
            services.append_messages(
                scope=SCOPE, session_id=session.pk, messages=[{"role": "user", "content": "m"}]
            )
            if kind != "live":
                Session.objects.filter(pk=session.pk).update(
                    expires_at=timezone.now() - timedelta(seconds=60), legal_hold=kind == "held"
                )
            ids[kind].append(str(session.pk))
    return ids


def state() -> dict[str, object]:
    """Every session id left, and the messages of each."""
    from django.db.models import Count

    from cortex_sessions.models import Session

    rows = Session.objects.annotate(n=Count("messages")).values_list("pk", "n")
    return {str(pk): n for pk, n in rows}


def _main(command: str, *args: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    if command == "migrate":
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
    elif command == "populate":
        json.dump(populate(int(args[0])), sys.stdout)
    elif command == "state":
        json.dump(state(), sys.stdout)


if __name__ == "__main__":
    _main(*sys.argv[1:])
