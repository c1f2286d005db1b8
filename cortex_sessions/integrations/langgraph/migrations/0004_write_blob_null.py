"""A pending write's value may be ``NULL`` (docs/design.md §19.1): a serializer whose
``dumps_typed`` returns ``(type, None)`` has its write stored as ``NULL`` and read back as
``None``, as LangGraph's in-memory saver keeps it. Before, the ``NOT NULL`` column made such a
write an ``IntegrityError`` on PostgreSQL, dropped it silently on SQLite (``INSERT OR IGNORE``)
and stored ``b""`` on MySQL/MariaDB (``INSERT IGNORE``).

On PostgreSQL the change drops the column's ``NOT NULL`` (a catalog change, no rewrite); the
functions of ``0003_packed_writes`` insert into the column as they did. Backward, a ``NULL``
value must be gone first (the column is ``NOT NULL`` again).
"""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("cortex_langgraph", "0003_packed_writes")]

    operations = [
        migrations.AlterField(
            model_name="checkpointwrite",
            name="blob",
            field=models.BinaryField(blank=True, null=True, verbose_name="value"),
        ),
    ]
