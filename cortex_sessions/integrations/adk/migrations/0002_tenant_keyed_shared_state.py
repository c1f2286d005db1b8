"""Key ADK app state by tenant and user state by scope (docs/design.md §13.3).

App state rows written before this migration keep ``tenant = ""``: the state of services bound
to no tenant. Each user state row moves to the scope its user's ADK sessions live at; a user
whose sessions lie at several scopes (a mapping that depends on more than ``(app_name,
user_id)``) gets one copy per scope, and a user without sessions keeps ``scope = ""``.
"""

from typing import Any

from django.db import migrations, models

import cortex_sessions.fields


def scope_user_states(apps: Any, schema_editor: Any) -> None:
    AdkSession = apps.get_model("cortex_adk", "AdkSession")
    AdkUserState = apps.get_model("cortex_adk", "AdkUserState")
    db = schema_editor.connection.alias
    for row in AdkUserState.objects.using(db).order_by("pk").iterator():
        scopes = sorted(
            set(
                AdkSession.objects.using(db)
                .filter(app_name=row.app_name, user_id=row.user_id)
                .values_list("session__scope", flat=True)
            )
        )
        if not scopes:
            continue
        row.scope = scopes[0]
        row.save(update_fields=["scope"])
        for scope in scopes[1:]:
            AdkUserState.objects.using(db).create(
                scope=scope, app_name=row.app_name, user_id=row.user_id, state=row.state
            )


def unscope_user_states(apps: Any, schema_editor: Any) -> None:
    AdkUserState = apps.get_model("cortex_adk", "AdkUserState")
    db = schema_editor.connection.alias
    kept: set[tuple[str, str]] = set()
    for row in AdkUserState.objects.using(db).order_by("scope", "pk").iterator():
        key = (row.app_name, row.user_id)
        if key in kept:
            row.delete()
        else:
            kept.add(key)


def unscope_app_states(apps: Any, schema_editor: Any) -> None:
    AdkAppState = apps.get_model("cortex_adk", "AdkAppState")
    AdkAppState.objects.using(schema_editor.connection.alias).exclude(tenant="").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("cortex_adk", "0001_adk_sessions_and_state"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="adkuserstate",
            name="cortex_adk_user_state_unique",
        ),
        migrations.AddField(
            model_name="adkappstate",
            name="tenant",
            field=cortex_sessions.fields.ScopeField(
                blank=True, default="", max_length=1024, verbose_name="tenant"
            ),
        ),
        migrations.AddField(
            model_name="adkuserstate",
            name="scope",
            field=cortex_sessions.fields.ScopeField(
                blank=True, default="", max_length=1024, verbose_name="scope"
            ),
        ),
        migrations.AlterField(
            model_name="adkappstate",
            name="app_name",
            field=cortex_sessions.fields.ExactCharField(max_length=255, verbose_name="app name"),
        ),
        migrations.AddConstraint(
            model_name="adkappstate",
            constraint=models.UniqueConstraint(
                fields=("tenant", "app_name"), name="cortex_adk_app_state_unique"
            ),
        ),
        # Backwards, tenants' app states go before app_name is unique again.
        migrations.RunPython(migrations.RunPython.noop, unscope_app_states),
        migrations.RunPython(scope_user_states, unscope_user_states),
        migrations.AddConstraint(
            model_name="adkuserstate",
            constraint=models.UniqueConstraint(
                fields=("scope", "app_name", "user_id"), name="cortex_adk_user_state_unique"
            ),
        ),
    ]
