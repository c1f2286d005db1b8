"""Start Django for the benchmarks against a given database."""

from __future__ import annotations

import os

__all__ = ["setup_django"]


def setup_django(url: str) -> None:
    """Point ``bench.settings`` at ``url`` and call ``django.setup()`` (once per process)."""
    os.environ["BENCH_DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    import django

    django.setup()
