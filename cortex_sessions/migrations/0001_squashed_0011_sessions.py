"""The tables of cortex_sessions, each created once in its final form (docs/design.md §4).

Made with ``manage.py squashmigrations cortex_sessions 0011`` and edited by hand, as Django's
documentation allows: the operations Django could not merge across (the backfill's and the
PostgreSQL tuning's ``RunPython``, the vendor-conditional ``AlterField`` of ``0008``) are folded
into the models' final form, so no index, column or constraint is created and then altered. It
replaces ``0001_message_log`` to ``0011_session_lifecycle``: a new database runs this migration; a
database that applied some of those originals but not all goes on with the originals, and one
that applied all of them is at this migration already. The originals are deleted in the release
after 1.0 (docs/design.md §4).

What each database gets, as through the originals:
- the session, message, imported-conversation and idempotency-key tables; on MySQL/MariaDB the
  identifier columns with exact collations and ``VARBINARY`` scopes (chosen per connection by
  ``ExactCharField`` and ``ScopeField``), the one-default rule as a unique index on
  ``(agent_id, scope, default_flag)`` and the partial indexes' fallbacks (``PartialIndex``,
  ``PartialUniqueConstraint``, docs/design.md §15.3);
- the default-session backfill of ``0003``, a data migration still (docs/design.md §4); on a new
  database it finds no legacy rows;
- on PostgreSQL only: the scope column's statistics target and the session table's autovacuum
  settings of ``0009`` (not its ``ANALYZE``: the table is new and empty), and the GIN index on
  ``metadata`` of ``0011``.
"""

from __future__ import annotations

import django.db.models.deletion
import django.utils.timezone
import uuid6
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

import cortex_sessions.constraints
import cortex_sessions.fields
from cortex_sessions.backfill import BACKFILL_MARKER, backfill_default_sessions, reverse_backfill
from cortex_sessions.migrations._operations import OnVendors

SESSION_TABLE = '"cortex_sessions_session"'

#: ``0009``: finer statistics for scope prefixes, and vacuum and analyze after 1% / 2% of the
#: session rows changed (every append moves ``updated_at``, so no counter update is HOT).
TUNE = (
    f'ALTER TABLE {SESSION_TABLE} ALTER COLUMN "scope" SET STATISTICS 1000',
    f"ALTER TABLE {SESSION_TABLE} SET (autovacuum_vacuum_scale_factor = 0.01,"
    " autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_insert_scale_factor = 0.05)",
)
UNTUNE = (
    f'ALTER TABLE {SESSION_TABLE} ALTER COLUMN "scope" SET STATISTICS -1',
    f"ALTER TABLE {SESSION_TABLE} RESET (autovacuum_vacuum_scale_factor,"
    " autovacuum_analyze_scale_factor, autovacuum_vacuum_insert_scale_factor)",
)

#: ``0011``: the metadata containment filter's index (docs/design.md §11.3).
CREATE_METADATA_INDEX = (
    "CREATE INDEX IF NOT EXISTS cortex_session_metadata_gin ON"
    f" {SESSION_TABLE} USING gin (metadata jsonb_path_ops)"
)
DROP_METADATA_INDEX = "DROP INDEX IF EXISTS cortex_session_metadata_gin"

ONE_DEFAULT_MESSAGE = "Another session is already the default for this agent and scope."


def backfill(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """The default-session backfill of ``0003`` (docs/design.md §4)."""
    backfill_default_sessions(
        session_model=apps.get_model("cortex_sessions", "Session"),
        message_model=apps.get_model("cortex_sessions", "Message"),
        using=schema_editor.connection.alias,
        marker=BACKFILL_MARKER,
    )


def unbackfill(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """The reverse of :func:`backfill`: the sessions it created go, their messages stay."""
    reverse_backfill(
        session_model=apps.get_model("cortex_sessions", "Session"),
        message_model=apps.get_model("cortex_sessions", "Message"),
        using=schema_editor.connection.alias,
        marker=BACKFILL_MARKER,
    )


class Migration(migrations.Migration):
    replaces = [
        ("cortex_sessions", "0001_message_log"),
        ("cortex_sessions", "0002_sessions"),
        ("cortex_sessions", "0003_backfill_default_sessions"),
        ("cortex_sessions", "0004_message_reference_indexes"),
        ("cortex_sessions", "0005_imported_conversations"),
        ("cortex_sessions", "0006_session_recent_index"),
        ("cortex_sessions", "0007_idempotency_keys"),
        ("cortex_sessions", "0008_message_session_index_is_the_seq_index"),
        ("cortex_sessions", "0009_session_recent_index_with_scope"),
        ("cortex_sessions", "0010_mysql_exact_columns_and_default_flag"),
        ("cortex_sessions", "0011_session_lifecycle"),
    ]

    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="Session",
            fields=[
                (
                    "id",
                    models.UUIDField(
                        default=uuid6.uuid7, editable=False, primary_key=True, serialize=False
                    ),
                ),
                (
                    "agent_id",
                    cortex_sessions.fields.ExactCharField(max_length=255, verbose_name="agent id"),
                ),
                ("scope", cortex_sessions.fields.ScopeField(max_length=1024, verbose_name="scope")),
                (
                    "title",
                    models.CharField(blank=True, default="", max_length=500, verbose_name="title"),
                ),
                ("metadata", models.JSONField(blank=True, default=dict, verbose_name="metadata")),
                ("cwd", models.TextField(blank=True, null=True, verbose_name="working directory")),
                (
                    "message_count",
                    models.BigIntegerField(default=0, editable=False, verbose_name="message count"),
                ),
                (
                    "last_message",
                    models.TextField(
                        blank=True, default="", editable=False, verbose_name="last message"
                    ),
                ),
                (
                    "last_seq",
                    models.BigIntegerField(default=0, editable=False, verbose_name="last seq"),
                ),
                ("is_default", models.BooleanField(default=False, verbose_name="default")),
                (
                    "backfilled_by",
                    models.CharField(
                        blank=True,
                        default="",
                        editable=False,
                        max_length=100,
                        verbose_name="backfilled by",
                    ),
                ),
                (
                    "created_at",
                    models.DateTimeField(
                        default=django.utils.timezone.now, editable=False, verbose_name="created at"
                    ),
                ),
                (
                    "updated_at",
                    models.DateTimeField(
                        default=django.utils.timezone.now, editable=False, verbose_name="updated at"
                    ),
                ),
                (
                    "default_flag",
                    models.GeneratedField(
                        db_persist=True,
                        expression=models.Case(
                            models.When(is_default=True, then=models.Value(True)),
                            default=models.Value(None),
                        ),
                        output_field=models.BooleanField(null=True),
                        verbose_name="default flag",
                    ),
                ),
                (
                    "archived_at",
                    models.DateTimeField(
                        blank=True, editable=False, null=True, verbose_name="archived at"
                    ),
                ),
                (
                    "forked_at_seq",
                    models.BigIntegerField(
                        blank=True, editable=False, null=True, verbose_name="forked at seq"
                    ),
                ),
                (
                    "forked_from",
                    models.UUIDField(
                        blank=True, editable=False, null=True, verbose_name="forked from"
                    ),
                ),
            ],
            options={
                "verbose_name": "session",
                "verbose_name_plural": "sessions",
                "ordering": ["-updated_at", "-id"],
                "indexes": [
                    models.Index(
                        fields=["agent_id", "scope", "-updated_at", "-id"],
                        name="cortex_session_agent_idx",
                    ),
                    models.Index(
                        fields=["-updated_at", "-id", "scope"], name="cortex_session_recent_idx"
                    ),
                    cortex_sessions.constraints.PartialIndex(
                        fallback_fields=["scope", "archived_at", "-updated_at", "-id"],
                        fields=["scope", "-updated_at", "-id"],
                        name="cortex_session_scope_idx",
                        where=models.Q(("archived_at__isnull", True)),
                    ),
                    cortex_sessions.constraints.PartialIndex(
                        fallback_fields=None,
                        fields=["scope", "-updated_at", "-id"],
                        name="cortex_session_archived_idx",
                        where=models.Q(("archived_at__isnull", False)),
                    ),
                ],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("message_count__gte", 0)),
                        name="cortex_session_count_non_negative",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("last_seq__gte", 0)),
                        name="cortex_session_last_seq_non_negative",
                    ),
                    cortex_sessions.constraints.PartialUniqueConstraint(
                        condition=models.Q(("is_default", True)),
                        fields=("agent_id", "scope"),
                        generated_field="default_flag",
                        name="cortex_session_one_default",
                        violation_error_message=ONE_DEFAULT_MESSAGE,
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(
                                ("forked_at_seq__isnull", True), ("forked_from__isnull", True)
                            ),
                            models.Q(("forked_at_seq__gte", 0), ("forked_from__isnull", False)),
                            _connector="OR",
                        ),
                        name="cortex_session_fork_provenance",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="Message",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("agent_id", cortex_sessions.fields.ExactCharField(max_length=255)),
                ("scope", cortex_sessions.fields.ScopeField(max_length=1024)),
                (
                    "role",
                    models.CharField(
                        choices=[
                            ("user", "User"),
                            ("assistant", "Assistant"),
                            ("system", "System"),
                            ("tool", "Tool"),
                        ],
                        max_length=16,
                    ),
                ),
                (
                    "source",
                    models.CharField(
                        choices=[
                            ("user", "User"),
                            ("checkpoint", "Checkpoint"),
                            ("session-reference", "Session Reference"),
                            ("host", "Host"),
                        ],
                        default="user",
                        max_length=32,
                    ),
                ),
                ("content", models.JSONField(default=list)),
                ("metadata", models.JSONField(blank=True, default=dict)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("seq", models.BigIntegerField(blank=True, null=True)),
                # No index of its own (0008): the unique (session_id, seq) index serves it.
                (
                    "session",
                    models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="messages",
                        to="cortex_sessions.session",
                    ),
                ),
            ],
            options={
                "verbose_name": "message",
                "verbose_name_plural": "messages",
                "ordering": ["session", "seq"],
                "indexes": [
                    models.Index(
                        fields=["agent_id", "scope", "id"], name="cortex_msg_agent_scope_idx"
                    ),
                    cortex_sessions.constraints.PartialIndex(
                        fallback_fields=["session", "role", "source", "seq"],
                        fields=["session", "seq"],
                        name="cortex_msg_checkpoint_idx",
                        where=models.Q(("role", "user"), ("source", "checkpoint")),
                    ),
                    cortex_sessions.constraints.PartialIndex(
                        fallback_fields=None,
                        fields=["session", "seq"],
                        name="cortex_msg_conversation_idx",
                        where=models.Q(
                            ("role", "assistant"),
                            models.Q(("role", "user"), ("source__in", ["user", "checkpoint"])),
                            _connector="OR",
                        ),
                    ),
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("session", "seq"), name="cortex_message_session_seq"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(("seq__isnull", True), ("session__isnull", True)),
                            models.Q(("seq__gt", 0), ("session__isnull", False)),
                            _connector="OR",
                        ),
                        name="cortex_message_seq_with_session",
                    ),
                ],
            },
        ),
        migrations.RunPython(backfill, unbackfill, elidable=False),
        migrations.CreateModel(
            name="ImportedConversation",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "agent_id",
                    cortex_sessions.fields.ExactCharField(
                        editable=False, max_length=255, verbose_name="agent id"
                    ),
                ),
                (
                    "scope",
                    cortex_sessions.fields.ScopeField(
                        editable=False, max_length=1024, verbose_name="scope"
                    ),
                ),
                (
                    "external_id",
                    cortex_sessions.fields.ExactCharField(
                        editable=False, max_length=255, verbose_name="external id"
                    ),
                ),
                (
                    "imported_at",
                    models.DateTimeField(
                        default=django.utils.timezone.now,
                        editable=False,
                        verbose_name="imported at",
                    ),
                ),
                (
                    "session",
                    models.OneToOneField(
                        editable=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="import_record",
                        to="cortex_sessions.session",
                    ),
                ),
            ],
            options={
                "verbose_name": "imported conversation",
                "verbose_name_plural": "imported conversations",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("agent_id", "scope", "external_id"),
                        name="cortex_import_external_id",
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="IdempotencyKey",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "scope",
                    cortex_sessions.fields.ScopeField(
                        editable=False, max_length=1024, verbose_name="scope"
                    ),
                ),
                (
                    "endpoint",
                    cortex_sessions.fields.ExactCharField(
                        editable=False, max_length=300, verbose_name="endpoint"
                    ),
                ),
                (
                    "key",
                    cortex_sessions.fields.ExactCharField(
                        ascii=True, editable=False, max_length=255, verbose_name="idempotency key"
                    ),
                ),
                (
                    "fingerprint",
                    models.CharField(editable=False, max_length=64, verbose_name="fingerprint"),
                ),
                (
                    "status_code",
                    models.PositiveSmallIntegerField(
                        default=0, editable=False, verbose_name="status code"
                    ),
                ),
                ("response", models.TextField(editable=False, verbose_name="response")),
                (
                    "created_at",
                    models.DateTimeField(
                        default=django.utils.timezone.now, editable=False, verbose_name="created at"
                    ),
                ),
            ],
            options={
                "verbose_name": "idempotency key",
                "verbose_name_plural": "idempotency keys",
                "indexes": [models.Index(fields=["created_at"], name="cortex_idempotency_created")],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("scope", "endpoint", "key"), name="cortex_idempotency_key_once"
                    )
                ],
            },
        ),
        OnVendors(
            vendors=["postgresql"],
            operations=[
                migrations.RunSQL(TUNE, UNTUNE, elidable=False),
                migrations.RunSQL(CREATE_METADATA_INDEX, DROP_METADATA_INDEX, elidable=False),
            ],
        ),
    ]
