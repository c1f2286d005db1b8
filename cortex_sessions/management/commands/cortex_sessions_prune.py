"""``manage.py cortex_sessions_prune``: delete expired idempotency keys (docs/design.md §12.1)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from cortex_sessions.conf import app_settings
from cortex_sessions.consistency import primary_reads
from cortex_sessions.services import prune_idempotency_keys


class Command(BaseCommand):
    help = (
        "Delete the Idempotency-Key records older than CORTEX_SESSIONS['IDEMPOTENCY_TTL'] "
        "seconds (default 24 hours). Run it from cron, e.g. hourly."
    )

    @primary_reads()  # read what the primary has (docs/design.md §17.2)
    def handle(self, *args: Any, **options: Any) -> None:
        deleted = prune_idempotency_keys()
        self.stdout.write(
            f"Deleted {deleted} idempotency key(s) older than "
            f"{app_settings.IDEMPOTENCY_TTL} seconds."
        )
