"""Run the default-session backfill once in a fresh process and print its figures as JSON.

Usage: ``python -m bench.lean python -m bench.backfill_child DATABASE_URL [--tracemalloc]``
(``bench.lean`` starts it from a lean parent, so the peak RSS it inherits is a few megabytes,
not the runner's). The output's ``rss_before_mb`` is the resident set just before the backfill
(Django set up, connected, one query run), ``rss_peak_mb`` the process's peak (``VmHWM``, the
larger of it and ``ru_maxrss``), ``rss_growth_mb`` the difference; with ``--tracemalloc``,
``heap_peak_mb`` is the peak of Python's traced heap during the backfill (a separate run:
tracing slows the backfill and adds its own memory).
"""

from __future__ import annotations

import argparse
import json
import resource
import time
import tracemalloc

from .setup import setup_django


def _status_mb(field: str) -> float | None:
    """A ``kB`` line of ``/proc/self/status`` (``VmRSS``, ``VmHWM``) in MiB, if there is one."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _peak_mb() -> float:
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return max(maxrss, _status_mb("VmHWM") or 0.0)


def _rss_mb() -> float:
    return _status_mb("VmRSS") or _peak_mb()


def main(argv: list[str] | None = None) -> None:
    """Backfill the database at the given URL; print one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--tracemalloc", action="store_true", help="also trace Python's heap")
    args = parser.parse_args(argv)
    setup_django(args.url)

    from django.db import connection

    from cortex_sessions.backfill import backfill_default_sessions
    from cortex_sessions.models import Message, Session

    queries = 0

    def count(execute, sql, params, many, context):
        nonlocal queries
        queries += 1
        return execute(sql, params, many, context)

    connection.ensure_connection()
    Session.objects.exists()  # load everything a first query loads before the baseline
    if args.tracemalloc:
        tracemalloc.start()
    before = _rss_mb()
    peak_before = _peak_mb()
    started = time.perf_counter()
    with connection.execute_wrapper(count):
        report = backfill_default_sessions(session_model=Session, message_model=Message)
    seconds = time.perf_counter() - started
    heap_peak = tracemalloc.get_traced_memory()[1] / 2**20 if args.tracemalloc else None
    left = Message.objects.filter(session__isnull=True).count()
    print(
        json.dumps(
            {
                "seconds": round(seconds, 2),
                "rows_per_s": round(report.messages_attached / seconds),
                "messages_attached": report.messages_attached,
                "sessions_created": report.sessions_created,
                "pairs_done": report.pairs,
                "legacy_left": left,
                "queries": queries,
                "rss_before_mb": round(before, 1),
                "rss_peak_before_mb": round(peak_before, 1),
                "rss_peak_mb": round(_peak_mb(), 1),
                "rss_growth_mb": round(_peak_mb() - before, 1),
                "heap_peak_mb": None if heap_peak is None else round(heap_peak, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
