# MySQL and MariaDB with the same guarantees (docs/design.md §15).
#
# - agent_id and external_id are ExactCharField from 0001/0002/0005 on, so that the backfill of
#   0003 already tells "Bot", "bot" and "bot " apart on MySQL/MariaDB (binary no-pad collation);
#   the AlterFields below change nothing on a database those migrations created, and make the
#   columns exact on a MySQL/MariaDB database migrated before they declared it. Their reverse
#   never makes a column inexact again, so it cannot fail halfway on identifiers that differ
#   only by case or trailing spaces (MySQL's DDL is not transactional).
# - Session.default_flag, a stored generated column: TRUE for the default, NULL otherwise.
# - The one-default rule becomes a PartialUniqueConstraint. Its database form is chosen by
#   vendor here: PostgreSQL and SQLite keep the partial unique index they already have (same
#   name, same SQL, so nothing is rebuilt); MySQL/MariaDB, where Django never created the
#   partial index, get UNIQUE (agent_id, scope, default_flag).

from __future__ import annotations

import cortex_sessions.constraints
import cortex_sessions.fields
from django.db import migrations, models

from cortex_sessions.migrations._operations import OnVendors

ONE_DEFAULT = "cortex_session_one_default"


class Migration(migrations.Migration):

    dependencies = [
        ('cortex_sessions', '0009_session_recent_index_with_scope'),
    ]

    operations = [
        # Collations matter on MySQL/MariaDB only: elsewhere no table is rebuilt.
        OnVendors(
            vendors=['mysql'],
            operations=[
                migrations.AlterField(
                    model_name='importedconversation',
                    name='agent_id',
                    field=cortex_sessions.fields.ExactCharField(editable=False, max_length=255, verbose_name='agent id'),
                ),
                migrations.AlterField(
                    model_name='importedconversation',
                    name='external_id',
                    field=cortex_sessions.fields.ExactCharField(editable=False, max_length=255, verbose_name='external id'),
                ),
                migrations.AlterField(
                    model_name='message',
                    name='agent_id',
                    field=cortex_sessions.fields.ExactCharField(max_length=255),
                ),
                migrations.AlterField(
                    model_name='session',
                    name='agent_id',
                    field=cortex_sessions.fields.ExactCharField(max_length=255, verbose_name='agent id'),
                ),
            ],
        ),
        migrations.AddField(
            model_name='session',
            name='default_flag',
            field=models.GeneratedField(db_persist=True, expression=models.Case(models.When(is_default=True, then=models.Value(True)), default=models.Value(None)), output_field=models.BooleanField(null=True), verbose_name='default flag'),
        ),
        # Where partial indexes exist the index of 0002 already is this constraint (same name,
        # same SQL); MySQL/MariaDB never had it and get UNIQUE (agent_id, scope, default_flag).
        OnVendors(
            vendors=['mysql'],
            operations=[
                migrations.RemoveConstraint(
                    model_name='session',
                    name=ONE_DEFAULT,
                ),
                migrations.AddConstraint(
                    model_name='session',
                    constraint=cortex_sessions.constraints.PartialUniqueConstraint(condition=models.Q(('is_default', True)), fields=('agent_id', 'scope'), generated_field='default_flag', name=ONE_DEFAULT, violation_error_message='Another session is already the default for this agent and scope.'),
                ),
            ],
        ),
    ]
