"""``python -m bench [--scale small|large]``: generate the data if needed, run every benchmark,
print the table, and write ``bench/results/<scale>.json`` and ``bench/results/<scale>.md``."""

from __future__ import annotations

import argparse
import json
import time

import psycopg

from .db import database_url
from .generate import SCALES, generate
from .run import RESULTS, markdown, run_all
from .setup import setup_django


def _generated(scale) -> bool:
    try:
        with psycopg.connect(database_url(scale.database)) as conn:
            count = conn.execute("SELECT count(*) FROM cortex_sessions_session").fetchone()[0]
    except psycopg.Error:
        return False
    return count >= scale.sessions


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and run."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="small")
    parser.add_argument("--regenerate", action="store_true", help="reload the data first")
    parser.add_argument("--reps", type=int, help="timed repetitions per operation")
    parser.add_argument("--no-backfill", action="store_true", help="skip the backfill runs")
    parser.add_argument("--no-peers", action="store_true", help="skip the peer stores")
    parser.add_argument(
        "--heavy-appends",
        type=int,
        default=None,
        help="appends of the heavy run before the plans are shown again (default: the "
        "scale's; 0 skips it)",
    )
    args = parser.parse_args(argv)
    scale = SCALES[args.scale]
    setup_django(database_url(scale.database))
    if args.regenerate or not _generated(scale):
        print(f"-- generating {scale.name} into {scale.database}")
        started = time.perf_counter()
        print(json.dumps(generate(scale)))
        print(f"-- generated in {time.perf_counter() - started:.0f}s")
        from django.db import connection

        connection.close()
    from django.core.management import call_command
    from django.db import DatabaseError

    try:
        call_command("migrate", verbosity=0)  # the schema under test is the checkout's
    except DatabaseError as exc:
        raise SystemExit(
            f"Could not migrate {scale.database} ({exc}). It was built by an older checkout; "
            "run again with --regenerate."
        ) from exc
    heavy = scale.heavy_appends if args.heavy_appends is None else args.heavy_appends
    results = run_all(
        scale,
        reps=args.reps,
        backfill=not args.no_backfill,
        peers=not args.no_peers,
        heavy=heavy,
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for path in (RESULTS / f"{scale.name}.json", RESULTS / f"{scale.name}-{stamp}.json"):
        path.write_text(json.dumps(results, indent=2, default=str))
    (RESULTS / f"{scale.name}.md").write_text(markdown(results))
    print(f"-- wrote {RESULTS / (scale.name + '.json')} and {RESULTS / (scale.name + '.md')}")


if __name__ == "__main__":
    main()
