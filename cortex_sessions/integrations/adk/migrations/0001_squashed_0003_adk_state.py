"""The ADK integration's tables, each created once in its final form (docs/design.md §4, §13.3).

Made with ``manage.py squashmigrations cortex_adk 0003`` and edited by hand, as Django's
documentation allows. The originals create a unique constraint, drop it and create it again over
other columns (``cortex_adk_user_state_unique``), make ``app_name`` unique and then not, and key
sessions by a unique ``(app_name, user_id, adk_id)`` before the hashed ``key``; here each table
has its final columns, indexes and constraints from the start. It replaces
``0001_adk_sessions_and_state`` to ``0003_tenant_unique_session_ids``: a database that applied some
of them goes on with the originals. The originals' data steps (user states moved to their
scopes, keys computed for existing rows, the backward refusal of ids at several scopes) act on
rows this migration can never find: it runs only where none of the originals ran, so the tables
are new. The originals are deleted in the release after 1.0.
"""

import django.db.models.deletion
from django.db import migrations, models

import cortex_sessions.fields


class Migration(migrations.Migration):
    replaces = [
        ("cortex_adk", "0001_adk_sessions_and_state"),
        ("cortex_adk", "0002_tenant_keyed_shared_state"),
        ("cortex_adk", "0003_tenant_unique_session_ids"),
    ]

    initial = True

    dependencies = [
        ("cortex_sessions", "0002_sessions"),
    ]

    operations = [
        migrations.CreateModel(
            name="AdkAppState",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "app_name",
                    cortex_sessions.fields.ExactCharField(max_length=255, verbose_name="app name"),
                ),
                ("state", models.JSONField(blank=True, default=dict, verbose_name="state")),
                (
                    "tenant",
                    cortex_sessions.fields.ScopeField(
                        blank=True, default="", max_length=1024, verbose_name="tenant"
                    ),
                ),
            ],
            options={
                "verbose_name": "ADK app state",
                "verbose_name_plural": "ADK app states",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("tenant", "app_name"), name="cortex_adk_app_state_unique"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="AdkUserState",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "app_name",
                    cortex_sessions.fields.ExactCharField(max_length=255, verbose_name="app name"),
                ),
                (
                    "user_id",
                    cortex_sessions.fields.ExactCharField(max_length=255, verbose_name="user id"),
                ),
                ("state", models.JSONField(blank=True, default=dict, verbose_name="state")),
                (
                    "scope",
                    cortex_sessions.fields.ScopeField(
                        blank=True, default="", max_length=1024, verbose_name="scope"
                    ),
                ),
                (
                    "key",
                    cortex_sessions.fields.ExactCharField(
                        ascii=True, editable=False, max_length=64, verbose_name="key"
                    ),
                ),
            ],
            options={
                "verbose_name": "ADK user state",
                "verbose_name_plural": "ADK user states",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("key",), name="cortex_adk_user_state_unique_key"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="AdkSession",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "app_name",
                    cortex_sessions.fields.ExactCharField(max_length=255, verbose_name="app name"),
                ),
                (
                    "user_id",
                    cortex_sessions.fields.ExactCharField(max_length=255, verbose_name="user id"),
                ),
                (
                    "adk_id",
                    cortex_sessions.fields.ExactCharField(
                        max_length=255, verbose_name="ADK session id"
                    ),
                ),
                ("state", models.JSONField(blank=True, default=dict, verbose_name="state")),
                (
                    "session",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="adk",
                        to="cortex_sessions.session",
                        verbose_name="session",
                    ),
                ),
                (
                    "key",
                    cortex_sessions.fields.ExactCharField(
                        ascii=True, editable=False, max_length=64, verbose_name="key"
                    ),
                ),
            ],
            options={
                "verbose_name": "ADK session",
                "verbose_name_plural": "ADK sessions",
                "indexes": [
                    models.Index(fields=["app_name", "user_id"], name="cortex_adk_session_user")
                ],
                "constraints": [
                    models.UniqueConstraint(fields=("key",), name="cortex_adk_session_unique_key")
                ],
            },
        ),
    ]
