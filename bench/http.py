"""``python -m bench.http``: the HTTP API against plain Django views, under gunicorn and wrk.

The example project (``bench.http_settings``: its middleware, session-cookie authentication and
org scope resolver) serves the API and, in the same gunicorn, the floor of :mod:`bench.http_floor`
(plain function views: the same service call, the same authentication, the same JSON shape)
against PostgreSQL (``BENCH_SERVER_URL``; database ``<BENCH_DB_PREFIX>_http``, loaded by the
bench's generator). For each worker class (``sync``, ``gthread``) and each endpoint, ``wrk`` on
loopback drives the API and the floor for ``--duration`` seconds each, in ``--rounds`` rounds
(the order alternating; ``gthread`` in ``--gthread-rounds``, default ``2 * rounds + 1``; gunicorn
keeps no connection alive, so no run's connections stay pinned to one worker), and the table shows the
medians of the time per request (from the throughput at one connection per worker thread), the
median and range of the per-round ratio app/floor and the number of rounds, against the targets
of docs/performance.md. A run that completes no request (a warm-up on a loaded machine) is run
again, twice as long each time (up to :data:`RUN_ATTEMPTS` runs), and reported; a run that
answers errors stops the bench. gunicorn listens on a free loopback port (``--port`` to choose).

``--profile`` runs each endpoint's requests in-process instead (``django.test.Client``) under
cProfile and prints where a request's time goes, by package and by function.

To time another endpoint, add one :class:`Endpoint` line to :func:`endpoints` (and its floor
view to :mod:`bench.http_floor`).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import secrets
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .db import database_url
from .generate import BIG_SESSION_TITLE, SCALES, Scale

__all__ = ["TARGETS", "Endpoint", "endpoints", "main", "scale_of"]

#: Targets for app/floor by family (docs/performance.md); ``key`` is the cost of
#: an Idempotency-Key: keyed append over the plain append, both the app's.
TARGETS = {"hot": 1.3, "list": 1.5, "key": 1.15}
#: Attempts of a wrk run that completes no request, each twice as long as the one before.
RUN_ATTEMPTS = 4
#: The org every bench request works in (the user is its org admin: scope ``org=o0``).
ORG = "o0"
USERNAME = "bench-http"
#: Sessions the appends rotate over, so concurrent appends do not queue on one row lock.
APPEND_SESSIONS = 32
AGENT = "bench-http"
SEARCH_WORD = "billing"


def scale_of(sessions: int) -> Scale:
    """The data set: the ``small`` scale's shape with ``sessions`` sessions (five messages
    each on average) and a big session of 200 messages; database ``<BENCH_DB_PREFIX>_http``."""
    return replace(
        SCALES["small"],
        name="http",
        sessions=sessions,
        messages=sessions * 5,
        big_session_messages=200,
        peer_messages=50,
    )


@dataclass(frozen=True)
class Endpoint:
    """One timed endpoint: the API's path under ``/api/cortex/`` and the floor's under
    ``/floor/`` are the same ``path`` (each ``{…}`` filled from the prepared ids)."""

    name: str
    family: str  # "hot" or "list" (TARGETS)
    method: str
    path: str
    body: str = ""
    keyed: bool = False  # a new Idempotency-Key per request
    rotate: bool = False  # over the APPEND_SESSIONS sessions
    url_name: str = ""  # the API's URL name; the endpoint is skipped when it does not exist
    note: str = ""  # printed when skipped


def endpoints(ids: dict[str, str]) -> list[Endpoint]:
    """The endpoints timed, with the prepared ``ids`` (:func:`prepare`)."""
    message = json.dumps({"role": "user", "content": "How do I rotate the billing key?"})
    return [
        Endpoint("append", "hot", "POST", "sessions/{append}/messages/", message, rotate=True),
        Endpoint("append+key", "hot", "POST", "sessions/{append}/messages/", message, True, True),
        Endpoint("newest 50", "hot", "GET", "sessions/{big}/messages/"),
        Endpoint("get", "hot", "GET", "sessions/{get}/"),
        Endpoint("resolve", "hot", "POST", "sessions/resolve/", json.dumps({"agent_id": AGENT})),
        Endpoint("list agent", "list", "GET", f"sessions/?agent_id={ids['agent']}"),
        Endpoint("count", "list", "GET", f"sessions/count/?agent_id={ids['agent']}"),
        Endpoint("search q", "list", "GET", f"sessions/?q={SEARCH_WORD}"),
        Endpoint(
            "context",
            "hot",
            "GET",
            "sessions/{get}/context/",
            url_name="cortex_sessions:session-context",
            note="GET /sessions/{id}/context/ is not routed",
        ),
    ]


def _generated(scale: Scale) -> bool:
    import psycopg

    try:
        with psycopg.connect(database_url(scale.database)) as conn:
            count = conn.execute("SELECT count(*) FROM cortex_sessions_session").fetchone()
    except psycopg.Error:
        return False
    return bool(count and count[0] >= scale.sessions)


def prepare(scale: Scale, *, regenerate: bool) -> dict[str, str]:
    """Load the data if needed, migrate, and make the bench's user, its session cookie, a CSRF
    token and the sessions the endpoints use.

    Returns:
        ``cookie`` (the ``Cookie`` header), ``csrf``, and the ids ``big``, ``get``, ``agent``,
        ``append`` (comma-separated).
    """
    os.environ["BENCH_DATABASE_URL"] = database_url(scale.database)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.http_settings")
    import django

    django.setup()
    from django.core.management import call_command

    from .generate import generate

    if regenerate or not _generated(scale):
        print(f"-- loading {scale.sessions:,} sessions into {scale.database}", flush=True)
        generate(scale, say=lambda *a, **k: None)
    call_command("migrate", verbosity=0)
    from django.contrib.auth import get_user_model
    from django.db import connections
    from django.test import Client

    from cortex_sessions import services
    from cortex_sessions.models import Session
    from example_project.tenancy.models import Membership

    user, _ = get_user_model().objects.get_or_create(username=USERNAME)
    Membership.objects.update_or_create(user=user, defaults={"org": ORG, "is_org_admin": True})
    client = Client()
    client.force_login(user)
    cookie = client.cookies["sessionid"].value
    csrf = secrets.token_hex(16)  # 32 characters: Django's unmasked secret format
    org = f"org={ORG}"
    big = Session.objects.get(title=BIG_SESSION_TITLE)
    sample = Session.objects.filter(scope__startswith=f"{org}/").order_by("id").first()
    assert sample is not None, "the data set has no session in org o0"
    appends = [
        str(services.resolve_session(scope=f"{org}/project=p0/user=u{n}", agent_id=AGENT)[0].id)
        for n in range(APPEND_SESSIONS)
    ]
    ids = {
        "cookie": f"sessionid={cookie}; csrftoken={csrf}",
        "csrf": csrf,
        "big": str(big.id),
        "get": str(sample.id),
        "agent": sample.agent_id,
        "append": ",".join(appends),
    }
    # The big session must lie in the bench's org: move it there if the generator put it
    # elsewhere (its scope is the generator's first scope, org=o0, at every scale today).
    if not str(big.scope).startswith(org):
        raise SystemExit(f"the big session is at {big.scope}, outside {org}")
    connections.close_all()
    return ids


def _paths(endpoint: Endpoint, ids: dict[str, str], base: str) -> list[str]:
    values = {"big": ids["big"], "get": ids["get"]}
    if endpoint.rotate:
        return [base + endpoint.path.format(append=i, **values) for i in ids["append"].split(",")]
    return [base + endpoint.path.format(append=ids["append"].split(",")[0], **values)]


def _headers(ids: dict[str, str], endpoint: Endpoint) -> dict[str, str]:
    headers = {"Cookie": ids["cookie"], "Accept": "application/json"}
    if endpoint.method == "POST":
        headers.update({"Content-Type": "application/json", "X-CSRFToken": ids["csrf"]})
    return headers


def _exists(endpoint: Endpoint) -> bool:
    if not endpoint.url_name:
        return True
    from django.urls import NoReverseMatch, reverse

    try:
        reverse(endpoint.url_name, kwargs={"pk": "x"})
    except NoReverseMatch:
        return False
    return True


def _check(server_url: str, endpoint: Endpoint, ids: dict[str, str]) -> None:
    """One request to the API and one to the floor: both must succeed with the same keys.

    Raises:
        RuntimeError: either answered an error, or the shapes differ.
    """
    from .http_load import request_once

    shapes = []
    for base in ("/api/cortex/", "/floor/"):
        url = server_url + _paths(endpoint, ids, base)[0]
        headers = _headers(ids, endpoint)
        if endpoint.keyed:
            headers["Idempotency-Key"] = secrets.token_hex(8)
        status, body = request_once(
            url, method=endpoint.method, headers=headers, body=endpoint.body.encode() or None
        )
        if status >= 300:
            raise RuntimeError(f"{endpoint.name}: {base} answered {status}: {body[:300]!r}")
        data = json.loads(body)
        shapes.append(sorted(data) if isinstance(data, dict) else type(data).__name__)
    if shapes[0] != shapes[1]:
        raise RuntimeError(f"{endpoint.name}: the API's shape {shapes[0]} is not the floor's")


def measure(
    ids: dict[str, str],
    *,
    kinds: list[str],
    workers: int,
    threads: int,
    rounds: int,
    seconds: float,
    only: frozenset[str] = frozenset(),
    gthread_rounds: int | None = None,
    port: int = 0,
    say: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Time every endpoint (or those named in ``only``) under each worker class.

    Args:
        rounds: interleaved rounds per endpoint (``sync``).
        gthread_rounds: rounds for ``gthread`` (default ``2 * rounds + 1``): two threads per
            worker on two CPUs make its per-round ratio noisier, so its median needs more
            rounds to settle.
        port: gunicorn's loopback port (0: a free one).
        say: where retries of a run that completed no request are reported.

    Returns:
        One row per (worker class, endpoint): ``kind``, ``endpoint``, ``family``, ``app_ms``
        and ``floor_ms`` (medians of the time per request), ``ratios`` (per round),
        ``retries`` (runs repeated because they completed no request) or ``skipped`` (why).

    Raises:
        RuntimeError: a run answered errors, or completed no request in :data:`RUN_ATTEMPTS`
            attempts of growing length.
    """
    from .http_load import Server, wrk

    rows: list[dict[str, Any]] = []
    workdir = Path(tempfile.mkdtemp(prefix="bench-http-"))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    env["DJANGO_SETTINGS_MODULE"] = "bench.http_settings"
    for kind in kinds:
        kind_rounds = rounds if kind != "gthread" else gthread_rounds or 2 * rounds + 1
        retries: dict[str, int] = defaultdict(int)
        with Server(
            kind,
            workers=workers,
            threads=threads,
            env=env,
            log=workdir / "gunicorn.log",
            port=port,
        ) as server:
            live, skipped = [], []
            for endpoint in chosen(ids, only):
                if not _exists(endpoint):
                    skipped.append(
                        {"kind": kind, "endpoint": endpoint.name, "skipped": endpoint.note}
                    )
                    continue
                _check(server.url, endpoint, ids)
                live.append(endpoint)
            samples: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))

            def run(
                endpoint: Endpoint,
                base: str,
                duration: float,
                kind: str = kind,
                retries: dict[str, int] = retries,
            ) -> float:
                for attempt in range(RUN_ATTEMPTS):
                    result = wrk(
                        server.url,
                        method=endpoint.method,
                        paths=_paths(endpoint, ids, base),
                        headers=_headers(ids, endpoint),
                        body=endpoint.body,
                        keyed=secrets.token_hex(6) if endpoint.keyed else None,
                        connections=server.connections,
                        seconds=duration * 2**attempt,
                        workdir=workdir,
                    )
                    if result.errors:
                        raise RuntimeError(
                            f"{endpoint.name} on {base}: {result.errors} errors in "
                            f"{result.requests} requests ({kind}); see {workdir}"
                        )
                    if result.requests:
                        # Time per request at one connection per worker thread.
                        return server.connections * 1000 / result.per_second
                    # None completed within the run (a loaded machine, a first request
                    # that compiles and plans): run again, twice as long.
                    retries[endpoint.name] += 1
                    say(
                        f"-- {kind} {endpoint.name} on {base}: no request completed in "
                        f"{duration * 2**attempt:g}s; running again for "
                        f"{duration * 2 ** (attempt + 1):g}s"
                    )
                raise RuntimeError(
                    f"{endpoint.name} on {base}: no request completed in {RUN_ATTEMPTS} runs "
                    f"({kind}); see {workdir}"
                )

            for endpoint in live:  # warm-up: connections, plans, caches
                run(endpoint, "/api/cortex/", 1)
                run(endpoint, "/floor/", 1)
            for number in range(kind_rounds):
                for endpoint in live:
                    order = ["/api/cortex/", "/floor/"]
                    if number % 2:
                        order.reverse()
                    for base in order:
                        samples[endpoint.name][base].append(run(endpoint, base, seconds))
            for endpoint in live:
                app = samples[endpoint.name]["/api/cortex/"]
                floor = samples[endpoint.name]["/floor/"]
                rows.append(
                    {
                        "kind": kind,
                        "endpoint": endpoint.name,
                        "family": endpoint.family,
                        "app_ms": statistics.median(app),
                        "floor_ms": statistics.median(floor),
                        "app_runs": app,
                        "ratios": [a / f for a, f in zip(app, floor, strict=True)],
                        "retries": retries[endpoint.name],
                    }
                )
            rows.extend(skipped)
    return rows


def table(rows: list[dict[str, Any]]) -> list[str]:
    """The results as a Markdown table, with the Idempotency-Key's own cost per worker class."""
    lines = [
        "| workers | endpoint | app ms | floor ms | app/floor median | range | rounds | target |",
        "|---|---|---:|---:|---:|---|---:|---|",
    ]
    for row in rows:
        if "skipped" in row:
            lines.append(f"| {row['kind']} | {row['endpoint']} | skipped: {row['skipped']} |||||")
            continue
        ratios = row["ratios"]
        target = TARGETS[row["family"]]
        median = statistics.median(ratios)
        verdict = "ok" if median <= target else "MISSED"
        rerun = f" ({row['retries']} rerun)" if row.get("retries") else ""
        lines.append(
            f"| {row['kind']} | {row['endpoint']} | {row['app_ms']:.2f} | {row['floor_ms']:.2f} "
            f"| {median:.2f}× | {min(ratios):.2f}–{max(ratios):.2f} | {len(ratios)}{rerun} "
            f"| ≤{target} {verdict} |"
        )
    by_kind: dict[str, dict[str, list[float]]] = defaultdict(dict)
    for row in rows:
        if "app_runs" in row:
            by_kind[row["kind"]][row["endpoint"]] = row["app_runs"]
    for kind, runs in by_kind.items():
        if "append" in runs and "append+key" in runs:
            cost = [k / p for k, p in zip(runs["append+key"], runs["append"], strict=True)]
            median = statistics.median(cost)
            verdict = "ok" if median <= TARGETS["key"] else "MISSED"
            lines.append(
                f"| {kind} | Idempotency-Key cost (app append+key / append) | | | {median:.2f}× "
                f"| {min(cost):.2f}–{max(cost):.2f} | {len(cost)} | ≤{TARGETS['key']} {verdict} |"
            )
    return lines


def _package(filename: str) -> str:
    """The part of the stack a profiled function belongs to."""
    path = filename.replace("\\", "/")
    for marker, name in (
        ("/cortex_sessions/api/", "cortex_sessions.api"),
        ("/cortex_sessions/services/", "cortex_sessions.services"),
        ("/cortex_sessions/", "cortex_sessions (other)"),
        ("/rest_framework/", "rest_framework"),
        ("/django_filters/", "django_filters"),
        ("/drf_spectacular/", "drf_spectacular"),
        ("/django/db/", "django.db"),
        ("/django/", "django (other)"),
        ("/psycopg", "psycopg"),
        ("/bench/", "bench (floor views)"),
        ("/example_project/", "example_project"),
    ):
        if marker in path:
            return name
    return "other (stdlib, json, datetime, C calls)"


def profile(ids: dict[str, str], *, requests: int, only: frozenset[str] = frozenset()) -> list[str]:
    """Each endpoint's (or those named in ``only``) requests in-process under cProfile
    (django.test.Client, the session cookie), app then floor: ms per request, and where the
    app's time goes."""
    from django.test import Client

    lines: list[str] = []
    for endpoint in chosen(ids, only):
        if not _exists(endpoint):
            lines.append(f"== {endpoint.name}: skipped ({endpoint.note})")
            continue
        per_request = {}
        stats = None
        for base in ("/api/cortex/", "/floor/"):
            client = Client()
            client.cookies.load(ids["cookie"])
            paths = _paths(endpoint, ids, base)
            headers = {"X-CSRFToken": ids["csrf"], "Accept": "application/json"}

            for n in range(min(20, requests)):  # warm-up
                _client_call(client, endpoint, paths[n % len(paths)], headers)
            profiler = cProfile.Profile()
            started = time.perf_counter()
            profiler.enable()
            for n in range(requests):
                _client_call(client, endpoint, paths[n % len(paths)], headers)
            profiler.disable()
            per_request[base] = (time.perf_counter() - started) * 1000 / requests
            if base == "/api/cortex/":
                stats = pstats.Stats(profiler)
        assert stats is not None
        app, floor = per_request["/api/cortex/"], per_request["/floor/"]
        lines.append(
            f"== {endpoint.name}: app {app:.2f} ms, floor {floor:.2f} ms per request "
            f"(profiled), app/floor {app / floor:.2f}×"
        )
        lines.extend(_breakdown(stats, requests))
    return lines


def _client_call(client: Any, endpoint: Endpoint, path: str, headers: dict[str, str]) -> None:
    """One request of ``endpoint`` through ``django.test.Client``."""
    extra = dict(headers)
    if endpoint.keyed:
        extra["Idempotency-Key"] = secrets.token_hex(8)
    if endpoint.method == "POST":
        client.post(path, endpoint.body, content_type="application/json", headers=extra)
    else:
        client.get(path, headers=extra)


def _breakdown(stats: pstats.Stats, requests: int) -> list[str]:
    """Own time by package, and the functions with the most inclusive time."""
    raw: Any = stats.stats  # type: ignore[attr-defined]  # {(file, line, name): (cc, nc, tt, ct, callers)}
    total = sum(entry[2] for entry in raw.values()) or 1.0
    own: dict[str, float] = defaultdict(float)
    for (filename, _line, _name), entry in raw.items():
        own[_package(filename)] += entry[2]
    lines = ["   own time by package:"]
    for name, seconds in sorted(own.items(), key=lambda item: -item[1]):
        lines.append(f"     {seconds / total:6.1%}  {seconds * 1000 / requests:6.3f} ms  {name}")
    lines.append("   most inclusive time (cortex_sessions, rest_framework, django_filters):")
    interesting = [
        (entry[3], key)
        for key, entry in raw.items()
        if any(
            part in key[0] for part in ("/cortex_sessions/", "/rest_framework/", "/django_filters/")
        )
    ]
    for seconds, (filename, line, name) in sorted(interesting, reverse=True)[:14]:
        short = "/".join(filename.split("/")[-2:])
        lines.append(f"     {seconds / total:6.1%}  {short}:{line}({name})")
    return lines


def chosen(ids: dict[str, str], only: frozenset[str] = frozenset()) -> list[Endpoint]:
    """:func:`endpoints`, only those named in ``only`` when it is not empty (``--endpoints``),
    in their usual order."""
    return [endpoint for endpoint in endpoints(ids) if not only or endpoint.name in only]


def _endpoint_names(text: str) -> frozenset[str]:
    """``--endpoints``: names of :func:`endpoints`, comma-separated.

    Raises:
        argparse.ArgumentTypeError: a name that is not an endpoint's.
    """
    names = frozenset(name.strip() for name in text.split(",") if name.strip())
    known = {endpoint.name for endpoint in endpoints({"agent": ""})}
    if unknown := sorted(names - known):
        raise argparse.ArgumentTypeError(
            f"unknown endpoint {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    return names


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def main(argv: list[str] | None = None, *, say: Callable[[str], None] = print) -> None:
    """Parse the command line and run (see the module's docstring).

    Raises:
        SystemExit: status 1: gunicorn or wrk is missing (without ``--profile``).
    """
    parser = argparse.ArgumentParser(
        prog="python -m bench.http", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--sessions", type=_positive, default=2_000, help="sessions loaded")
    parser.add_argument("--rounds", type=_positive, default=5, help="interleaved rounds")
    parser.add_argument(
        "--gthread-rounds",
        type=_positive,
        help="interleaved rounds for gthread, whose ratio swings more (default 2 * rounds + 1)",
    )
    parser.add_argument(
        "--port", type=int, default=0, help="gunicorn's loopback port (default: a free one)"
    )
    parser.add_argument("--duration", type=float, default=5.0, help="seconds of each wrk run")
    parser.add_argument("--workers", type=_positive, default=2, help="gunicorn workers")
    parser.add_argument("--threads", type=_positive, default=2, help="threads of a gthread worker")
    parser.add_argument("--kinds", default="sync,gthread", help="worker classes, comma-separated")
    parser.add_argument(
        "--endpoints",
        type=_endpoint_names,
        default=frozenset(),
        help="only these endpoints, comma-separated (e.g. append,append+key); default all",
    )
    parser.add_argument("--profile", action="store_true", help="profile in-process instead")
    parser.add_argument("--requests", type=_positive, default=300, help="requests profiled")
    parser.add_argument("--regenerate", action="store_true", help="reload the data first")
    parser.add_argument("--output", type=Path, help="write the rows as JSON here")
    args = parser.parse_args(argv)
    if not args.profile:
        from .http_load import missing_tools

        if missing := missing_tools():
            raise SystemExit("python -m bench.http needs " + " and ".join(missing))
    scale = scale_of(args.sessions)
    ids = prepare(scale, regenerate=args.regenerate)
    if args.profile:
        for line in profile(ids, requests=args.requests, only=args.endpoints):
            say(line)
        return
    kinds = [kind.strip() for kind in args.kinds.split(",") if kind.strip()]
    rows = measure(
        ids,
        kinds=kinds,
        workers=args.workers,
        threads=args.threads,
        rounds=args.rounds,
        seconds=args.duration,
        only=args.endpoints,
        gthread_rounds=args.gthread_rounds,
        port=args.port,
        say=say,
    )
    gthread_rounds = args.gthread_rounds or 2 * args.rounds + 1
    say(
        f"-- {args.sessions:,} sessions, {args.workers} workers ({args.threads} threads for "
        f"gthread), {args.rounds} rounds ({gthread_rounds} for gthread) of {args.duration:g}s, "
        "machine load "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    for line in table(rows):
        say(line)
    if args.output:
        args.output.write_text(json.dumps(rows, indent=2))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
