"""Operations the migrations share (docs/design.md §4): the vendor-conditional wrapper of
``0010`` and the message search schema of ``0012``, used by those originals and by the squashed
migrations that replace them, so each is written once.

The migration loader skips modules whose name starts with ``_``, so this is no migration.
"""

from __future__ import annotations

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.operations.base import Operation
from django.db.migrations.state import ProjectState

from cortex_sessions import search
from cortex_sessions.conf import app_settings


class OnVendors(migrations.SeparateDatabaseAndState):
    """``operations`` change the state everywhere and the schema only on ``vendors``.

    Args:
        vendors: ``connection.vendor`` values (``"postgresql"``, ``"mysql"``, ``"sqlite"``)
            whose schema the operations change; elsewhere they change the migration state only.
        operations: any operations, e.g. ``RunSQL`` of SQL that only one database speaks.
    """

    def __init__(self, vendors: list[str], operations: list[Operation]) -> None:
        super().__init__(state_operations=operations, database_operations=operations)
        self.vendors = tuple(vendors)

    def database_forwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        if schema_editor.connection.vendor in self.vendors:
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        if schema_editor.connection.vendor in self.vendors:
            super().database_backwards(app_label, schema_editor, from_state, to_state)

    def describe(self) -> str:
        return f"On {', '.join(self.vendors)} only: " + "; ".join(
            operation.describe() for operation in self.database_operations
        )


class MessageSearchSchema(Operation):
    """Add (backward: drop) the message search column and both GIN indexes, on PostgreSQL
    only (docs/design.md §11.5; locking and timings in ``0012_message_search``). The text
    search configuration is ``CORTEX_SESSIONS["SEARCH_CONFIG"]`` when it runs. The indexes are
    built ``CONCURRENTLY``, so the migration holding it must be non-atomic."""

    reversible = True
    reduces_to_sql = True

    def state_forwards(self, app_label: str, state: ProjectState) -> None:
        """Nothing: the column and indexes are not part of the models (PostgreSQL only)."""

    def database_forwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        connection = schema_editor.connection
        if connection.vendor != "postgresql":
            return
        config = app_settings.SEARCH_CONFIG
        schema_editor.execute(search.add_column_statement(config))
        search.drop_invalid_indexes(connection)
        for statement in search.create_index_statements(config):
            schema_editor.execute(statement)

    def database_backwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return
        for statement in search.drop_statements():
            schema_editor.execute(statement)

    def describe(self) -> str:
        return "On PostgreSQL: message search column and GIN indexes"
