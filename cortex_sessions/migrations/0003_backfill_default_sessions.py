"""Give every pre-existing unsessioned conversation its first default session (docs/design.md §4).

Non-atomic on purpose: the backfill commits batch by batch (each batch moves the counters with the
rows it attaches), so a million legacy rows never sit in one transaction or in memory. It is
idempotent, so an interrupted run is finished by running ``migrate`` (or the
``cortex_sessions_backfill`` command) again.
"""

from __future__ import annotations

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

from cortex_sessions.backfill import BACKFILL_MARKER, backfill_default_sessions, reverse_backfill


def forward(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    backfill_default_sessions(
        session_model=apps.get_model("cortex_sessions", "Session"),
        message_model=apps.get_model("cortex_sessions", "Message"),
        using=schema_editor.connection.alias,
        marker=BACKFILL_MARKER,
    )


def backward(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    reverse_backfill(
        session_model=apps.get_model("cortex_sessions", "Session"),
        message_model=apps.get_model("cortex_sessions", "Message"),
        using=schema_editor.connection.alias,
        marker=BACKFILL_MARKER,
    )


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("cortex_sessions", "0002_sessions"),
    ]

    operations = [
        migrations.RunPython(forward, backward, elidable=False),
    ]
