"""On PostgreSQL, drop the append functions that no code of this version calls:
``cortex_sessions_append_one`` (``0013``), ``_v2`` (``0014``) and ``_v3`` (``0015``), superseded by
``cortex_sessions_append_one_v4`` (``0016``), which stays (docs/design.md §4, §14.1).

They stayed for the code of the commit before each of them; no release calls them, so the
squashed history (``0012_squashed_0018_search_and_functions``) ends where this migration does:
each function created once, in the form the code calls. Other databases have no functions, so
on them this migration does nothing. Dropping a function takes no lock on the tables.

Backward, the three functions are created again from their migrations' frozen SQL. This
migration goes when the originals it is squashed with go (docs/design.md §4).
"""

from __future__ import annotations

import importlib

from django.db import migrations

from cortex_sessions.migrations._operations import OnVendors

#: The migrations whose append functions this one drops, oldest first.
SUPERSEDED = (
    "0013_append_one_function",
    "0014_append_one_narrow_row",
    "0015_append_one_monotonic_updated_at",
)


def _drop(name: str) -> migrations.RunSQL:
    """``RunSQL`` dropping the function of migration ``name`` (backward: creating it again)."""
    module = importlib.import_module(f"cortex_sessions.migrations.{name}")
    return migrations.RunSQL(module.DROP, module.CREATE, elidable=False)


class Migration(migrations.Migration):
    dependencies = [
        ("cortex_sessions", "0017_get_and_resolve_functions"),
    ]

    operations = [
        OnVendors(vendors=["postgresql"], operations=[_drop(name) for name in SUPERSEDED])
    ]
