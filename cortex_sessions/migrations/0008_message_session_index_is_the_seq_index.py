"""Drop the message table's index on ``session_id`` alone: the unique ``(session_id, seq)``
index serves every lookup by session, and the narrower index made PostgreSQL read a long
session's every message and sort them for a page of the newest 50 (docs/performance.md).

On PostgreSQL only the index is dropped; Django's ``AlterField`` would also drop and re-add the
foreign key, re-checking every message row under a lock. Other databases take ``AlterField``
as it is (MySQL/MariaDB keep the foreign key on the unique index's leading column).
"""

from __future__ import annotations

import django.db.models.deletion
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import ProjectState


def _session_only_indexes(schema_editor: BaseDatabaseSchemaEditor, table: str) -> list[str]:
    with schema_editor.connection.cursor() as cursor:
        constraints = schema_editor.connection.introspection.get_constraints(cursor, table)
    return [
        name
        for name, info in constraints.items()
        if info["index"] and not info["unique"] and info["columns"] == ["session_id"]
    ]


class AlterSessionIndex(migrations.AlterField):
    """``AlterField`` of ``Message.session``'s ``db_index`` that on PostgreSQL touches only the
    index."""

    def database_forwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        model = to_state.apps.get_model(app_label, self.model_name)
        for name in _session_only_indexes(schema_editor, model._meta.db_table):
            schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(name)}")

    def database_backwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return super().database_backwards(app_label, schema_editor, from_state, to_state)
        model = to_state.apps.get_model(app_label, self.model_name)
        if not _session_only_indexes(schema_editor, model._meta.db_table):
            field = model._meta.get_field("session")
            schema_editor.execute(schema_editor._create_index_sql(model, fields=[field]))  # type: ignore[attr-defined]  # private, not in the stubs


class Migration(migrations.Migration):
    dependencies = [
        ("cortex_sessions", "0007_idempotency_keys"),
    ]

    operations = [
        AlterSessionIndex(
            model_name="message",
            name="session",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="messages",
                to="cortex_sessions.session",
            ),
        ),
    ]
