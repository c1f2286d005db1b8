"""ADK session ids unique per scope; sessions and user states unique by a hashed key
(docs/design.md §13.3).

Before, an ADK session id was unique per ``(app_name, user_id)`` across every scope: a tenant
creating an id another tenant already used got ``AlreadyExistsError``, learning that the id
existed elsewhere and losing an id free in its own scope. Now it is unique per ``(scope,
app_name, user_id)``, the scope being its cortex session's (where the user maps to), as user
state is keyed since 0002.

Neither natural key can be indexed whole: a 1,024-byte scope and 255-character names in
four-byte UTF-8 exceed PostgreSQL's 2,704-byte B-tree entry limit (the old unique indexes
failed with "index row size … exceeds btree version 4 maximum" for long non-ASCII names) and
InnoDB's 3,072-byte key limit. So each row gets ``key``, the SHA-256 of its natural key, and the
unique constraint is on that; ``AdkSession`` keeps an index on ``(app_name, user_id)`` (at most
2,040 bytes) for ``list_sessions``.

Forward, every existing row gets its key: no two collide, since the new keys are finer than (or,
for user state, equal to) the old unique keys. Backward is refused, before any change, while an
ADK id is used at two scopes for the same app and user (the old constraint cannot hold them):
delete or rename one of them first. On PostgreSQL, rows whose names are too long for the old
indexes make the backward migration fail as well (in its transaction, changing nothing).
"""

import hashlib
import json
from typing import Any

from django.db import migrations, models
from django.db.migrations.exceptions import IrreversibleError

import cortex_sessions.fields

BATCH = 500


def _digest(*parts: str) -> str:
    # The same as models._digest: keys written here must equal the ones the service computes.
    text = json.dumps(list(parts), ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _save_keys(model: Any, db: str, rows: Any, key: Any) -> None:
    batch = []
    for row in rows:
        row.key = key(row)
        batch.append(row)
        if len(batch) == BATCH:
            model.objects.using(db).bulk_update(batch, ["key"])
            batch = []
    if batch:
        model.objects.using(db).bulk_update(batch, ["key"])


def fill_keys(apps: Any, schema_editor: Any) -> None:
    AdkSession = apps.get_model("cortex_adk", "AdkSession")
    AdkUserState = apps.get_model("cortex_adk", "AdkUserState")
    db = schema_editor.connection.alias
    sessions = (
        AdkSession.objects.using(db)
        .select_related("session")
        .only("pk", "app_name", "user_id", "adk_id", "session__scope")
        .order_by("pk")
        .iterator(chunk_size=BATCH)
    )
    _save_keys(
        AdkSession,
        db,
        sessions,
        lambda row: _digest(row.session.scope, row.app_name, row.user_id, row.adk_id),
    )
    states = (
        AdkUserState.objects.using(db)
        .only("pk", "scope", "app_name", "user_id")
        .order_by("pk")
        .iterator(chunk_size=BATCH)
    )
    _save_keys(AdkUserState, db, states, lambda row: _digest(row.scope, row.app_name, row.user_id))


def refuse_ids_at_several_scopes(apps: Any, schema_editor: Any) -> None:
    AdkSession = apps.get_model("cortex_adk", "AdkSession")
    shared = (
        AdkSession.objects.using(schema_editor.connection.alias)
        .values("app_name", "user_id", "adk_id")
        .annotate(scopes=models.Count("pk"))
        .filter(scopes__gt=1)
        .order_by("app_name", "user_id", "adk_id")
    )
    examples = [(row["app_name"], row["user_id"], row["adk_id"]) for row in shared[:6]]
    if examples:
        raise IrreversibleError(
            "Cannot unapply cortex_adk.0003: these ADK session ids (app_name, user_id, id) are "
            f"used at more than one scope, which 0002 cannot store: {examples[:5]!r}"
            f"{' and more' if len(examples) > 5 else ''}. Delete or rename the extra sessions "
            "first."
        )


class Migration(migrations.Migration):
    dependencies = [
        ("cortex_adk", "0002_tenant_keyed_shared_state"),
    ]

    operations = [
        migrations.AddField(
            model_name="adksession",
            name="key",
            field=cortex_sessions.fields.ExactCharField(
                ascii=True, default="", editable=False, max_length=64, verbose_name="key"
            ),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="adkuserstate",
            name="key",
            field=cortex_sessions.fields.ExactCharField(
                ascii=True, default="", editable=False, max_length=64, verbose_name="key"
            ),
            preserve_default=False,
        ),
        migrations.RunPython(fill_keys, migrations.RunPython.noop),
        migrations.RemoveConstraint(
            model_name="adksession",
            name="cortex_adk_session_unique_id",
        ),
        migrations.RemoveConstraint(
            model_name="adkuserstate",
            name="cortex_adk_user_state_unique",
        ),
        migrations.AddConstraint(
            model_name="adksession",
            constraint=models.UniqueConstraint(
                fields=("key",), name="cortex_adk_session_unique_key"
            ),
        ),
        migrations.AddConstraint(
            model_name="adkuserstate",
            constraint=models.UniqueConstraint(
                fields=("key",), name="cortex_adk_user_state_unique_key"
            ),
        ),
        migrations.AddIndex(
            model_name="adksession",
            index=models.Index(fields=["app_name", "user_id"], name="cortex_adk_session_user"),
        ),
        # Backward this runs first, so a refusal comes before any change (MariaDB and MySQL
        # cannot roll schema changes back).
        migrations.RunPython(migrations.RunPython.noop, refuse_ids_at_several_scopes),
    ]
