"""Data for the erasure tests: tenants with every kind of row the app and the ADK integration
keep, and a snapshot of every table to compare before and after (docs/design.md §18.2).

Also run as a script by the kill-and-resume test (``python -m tests.erasure_data populate|
erase|resume|snapshot``) against the database of ``DATABASE_URL``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

#: Tenants side by side; ``org=acme2`` and ``org=acme-x`` sort next to ``org=acme`` and must
#: survive its erasure (a prefix that is not a level).
TENANTS = ("org=acme", "org=acme2", "org=acme-x", "org=globex")
USERS = ("user=1", "user=2")


def populate(sessions_per_user: int = 2, messages_per_session: int = 3) -> None:
    """Sessions with messages (through the services, with ``Idempotency-Key`` records), an
    imported conversation, a legacy message and ADK session, user and app state, for every
    user of every tenant."""
    from cortex_sessions import services
    from cortex_sessions.integrations.adk.models import AdkAppState, AdkSession, AdkUserState
    from cortex_sessions.models import Message
    from cortex_sessions.transfer import import_conversation, parse_conversation

    for tenant in TENANTS:
        AdkAppState.objects.create(tenant=tenant, app_name="app", state={"k": tenant})
        for user in USERS:
            scope = f"{tenant}/{user}"
            for number in range(sessions_per_user):
                session = services.create_session(
                    scope=scope,
                    agent_id="bot",
                    title=f"{scope} {number}",
                    idempotency_key=f"c{number}",
                )
                services.append_messages(
                    scope=scope,
                    session_id=session.pk,
                    messages=[
                        {"role": "user", "content": f"{scope} says {index}"}
                        for index in range(messages_per_session)
                    ],
                    idempotency_key=f"a{number}",
                )
            line = json.dumps(
                {"id": f"ext-{scope}", "messages": [{"role": "user", "content": "imported"}]}
            )
            import_conversation(parse_conversation(line), scope=scope, agent_id="bot")
            Message.objects.create(agent_id="bot", scope=scope, role="user", content="legacy")
            adk = services.create_session(scope=scope, agent_id="adk", title="adk")
            AdkSession.objects.create(session=adk, app_name="app", user_id=user, adk_id="s1")
            AdkUserState.objects.create(scope=scope, app_name="app", user_id=user, state={"u": 1})


def snapshot() -> dict[str, dict[str, list[Any]]]:
    """Every row of every installed model but ``Erasure``: ``{label: {pk: [values]}}``."""
    from django.apps import apps

    tables: dict[str, dict[str, list[Any]]] = {}
    for model in apps.get_models():
        if model._meta.label == "cortex_sessions.Erasure":
            continue
        names = [field.attname for field in model._meta.concrete_fields]
        rows = model._base_manager.using("default").order_by("pk").values_list("pk", *names)
        tables[model._meta.label] = {str(pk): [str(v) for v in values] for pk, *values in rows}
    return tables


def scope_of(label: str, row: list[str], before: dict[str, dict[str, list[Any]]]) -> str | None:
    """The scope a snapshot row belongs to, or ``None`` for rows of no scope."""
    from django.apps import apps

    model = apps.get_model(label)
    names = [field.attname for field in model._meta.concrete_fields]
    if "scope" in names:
        return row[names.index("scope")]
    if "tenant" in names:
        return row[names.index("tenant")]
    if "session_id" in names and label.startswith("cortex"):
        session = before["cortex_sessions.Session"].get(row[names.index("session_id")])
        if session is not None:
            return scope_of("cortex_sessions.Session", session, before)
    return None


def within(scope: str | None, erased: str) -> bool:
    """Whether ``scope`` is ``erased`` or beneath it."""
    return scope is not None and (scope == erased or scope.startswith(erased + "/"))


def _main(command: str, *args: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    from cortex_sessions.services import erasure

    if command == "migrate":
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
    elif command == "populate":
        populate(sessions_per_user=int(args[0]))
    elif command == "snapshot":
        json.dump(snapshot(), sys.stdout)
    elif command == "erase":
        # Killed by the test inside the transaction of the second session batch: that
        # batch's sessions are deleted but not committed when the process dies.
        calls = 0
        original = erasure._delete_sessions

        def slow(record: Any, pks: Any, using: str) -> None:
            nonlocal calls
            calls += 1
            if calls < 2:
                original(record, pks, using)
                return
            from django.db import transaction

            with transaction.atomic(using=using):
                erasure.Session.objects.using(using).filter(pk__in=pks).delete()
                print(f"KILL ME {record.pk}", flush=True)
                import time

                time.sleep(600)

        erasure._delete_sessions = slow  # type: ignore[assignment]
        erasure.erase_scope(scope=args[0], batch_size=int(args[1]))
    elif command == "resume":
        record = erasure.resume_erasure(erasure_id=args[0], batch_size=int(args[1]))
        json.dump({"status": record.status, "counts": record.counts}, sys.stdout)


if __name__ == "__main__":
    _main(*sys.argv[1:])
