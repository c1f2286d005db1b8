"""Operations the migrations share (docs/design.md §4): the vendor-conditional wrapper of
``0010``, the message search schema of ``0012`` and the token-count data step of ``0019``, used by
those originals and by the squashed migrations that replace them, so each is written once.

The migration loader skips modules whose name starts with ``_``, so this is no migration.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.operations.base import Operation
from django.db.migrations.state import ProjectState
from django.db.models import OuterRef, Subquery, Sum, Value
from django.db.models.functions import Coalesce

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


#: Rows read and written per batch by :func:`fill_token_counts`.
BATCH_SIZE = 1000


def fill_token_counts(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """Give every message its ``token_count`` and every session its ``context_tokens``, in
    batches of :data:`BATCH_SIZE` with keyset pagination, so memory stays bounded whatever the
    table's size (docs/design.md §16.2): the data step of ``0019_context_window`` and of the
    squash that replaces it. Counts come from ``TOKEN_COUNTER`` as configured when it runs; a
    session's ``context_tokens`` is the sum over its messages (no compaction exists before
    ``0019``). Idempotent; on a new database it finds no rows.

    Args:
        apps: the historical apps of the migration state (``RunPython``'s first argument).
        schema_editor: the migration's schema editor; its connection's alias is written.
    """
    from cortex_sessions.tokens import count_tokens

    alias = schema_editor.connection.alias
    Message = apps.get_model("cortex_sessions", "Message")
    Session = apps.get_model("cortex_sessions", "Session")
    messages = Message.objects.using(alias)
    last = 0
    while True:
        batch = list(
            messages.filter(pk__gt=last)
            .order_by("pk")
            .values_list("pk", "role", "content")[:BATCH_SIZE]
        )
        if not batch:
            break
        messages.bulk_update(
            [
                Message(pk=pk, token_count=count_tokens(role, content))
                for pk, role, content in batch
            ],
            ["token_count"],
        )
        last = batch[-1][0]
    sessions = Session.objects.using(alias)
    per_session = (
        messages.filter(session=OuterRef("pk"))
        .order_by()
        .values("session")
        .annotate(total=Sum("token_count"))
        .values("total")
    )
    after = None
    while True:
        page = sessions.order_by("pk")
        if after is not None:
            page = page.filter(pk__gt=after)
        ids = list(page.values_list("pk", flat=True)[:BATCH_SIZE])
        if not ids:
            break
        sessions.filter(pk__in=ids).update(
            context_tokens=Coalesce(
                Subquery(per_session, output_field=models.BigIntegerField()), Value(0)
            )
        )
        after = ids[-1]
