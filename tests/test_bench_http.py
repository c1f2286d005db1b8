"""The HTTP bench (``python -m bench.http``): at a tiny size it prints every endpoint with its
ratio to the floor (needs gunicorn, wrk and PostgreSQL; skipped otherwise), and the profile
mode prints where each endpoint's time goes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

psycopg = pytest.importorskip("psycopg")  # the bench drives psycopg 3 (its `bench` extra)

from bench import http as bench_http  # noqa: E402
from bench.http_load import missing_tools  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SERVER = os.environ.get("BENCH_SERVER_URL", "postgres://postgres@127.0.0.1:5432")
NAMES = [endpoint.name for endpoint in bench_http.endpoints({"agent": "a"})]


@pytest.fixture(scope="module")
def prefix() -> str:
    try:
        psycopg.connect(f"{SERVER}/postgres", connect_timeout=5).close()
    except psycopg.Error:
        pytest.skip(f"no PostgreSQL at {SERVER}")
    return f"cortex_bench_t{os.getpid()}"


@pytest.fixture(scope="module", autouse=True)
def _drop_database(prefix: str):
    yield
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{prefix}_http" WITH (FORCE)')


def _bench(prefix: str, *args: str) -> subprocess.CompletedProcess[str]:
    # Without the tests' DJANGO_SETTINGS_MODULE, which pytest-django exports.
    inherited = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    return subprocess.run(
        [sys.executable, "-m", "bench.http", "--sessions", "60", *args],
        cwd=ROOT,
        env={**inherited, "PYTHONPATH": str(ROOT), "BENCH_DB_PREFIX": prefix},
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_every_endpoint_is_timed_against_the_floor(prefix: str):
    if missing := missing_tools():
        pytest.skip("needs " + " and ".join(missing))
    result = _bench(prefix, "--rounds", "1", "--duration", "1", "--kinds", "sync,gthread")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line for line in result.stdout.splitlines() if line.startswith("| sync |")]
    timed = {line.split(" | ")[1] for line in rows if "×" in line}
    skipped = {line.split(" | ")[1] for line in rows if "skipped:" in line}
    assert timed | skipped == {*NAMES, "Idempotency-Key cost (app append+key / append)"}
    assert {"append", "append+key", "newest 50", "get", "resolve", "list agent"} <= timed
    assert {"count", "search q"} <= timed
    assert any(
        line.startswith("| gthread | get |") and "×" in line for line in result.stdout.splitlines()
    )


def test_the_profile_mode_shows_where_each_endpoint_spends_its_time(prefix: str):
    result = _bench(prefix, "--profile", "--requests", "5")
    assert result.returncode == 0, result.stderr[-3000:]
    for name in NAMES:
        assert f"== {name}:" in result.stdout
    assert "own time by package:" in result.stdout
    assert "rest_framework" in result.stdout


def test_endpoints_names_the_endpoints_profiled(prefix: str):
    result = _bench(prefix, "--profile", "--requests", "3", "--endpoints", "append+key, get")
    assert result.returncode == 0, result.stderr[-3000:]
    profiled = [line for line in result.stdout.splitlines() if line.startswith("== ")]
    assert [line.split(":")[0] for line in profiled] == ["== append+key", "== get"]


def test_an_unknown_endpoint_name_is_a_usage_error():
    with pytest.raises(SystemExit) as exited:
        bench_http.main(["--endpoints", "append,apend"])
    assert exited.value.code == 2
    assert bench_http.chosen({"agent": "a"}, frozenset({"get", "append"})) == [
        endpoint
        for endpoint in bench_http.endpoints({"agent": "a"})
        if endpoint.name in {"get", "append"}
    ]
    assert bench_http.chosen({"agent": "a"}) == bench_http.endpoints({"agent": "a"})


@pytest.mark.django_db
def test_the_floor_writes_a_session_and_a_message_as_the_api_does():
    # The floor is a fair one only if its bodies are the API's.
    from rest_framework.renderers import JSONRenderer

    from bench.http_floor import message_dict, session_dict
    from cortex_sessions import services
    from cortex_sessions.api.serializers import MessageSerializer, SessionSerializer

    session = services.create_session(scope="org=a", agent_id="bot", metadata={"k": "é"})
    result = services.append_messages(
        scope="org=a", session_id=session.id, messages=[{"role": "user", "content": "hi"}]
    )
    render = JSONRenderer().render
    assert render(session_dict(result.session)) == render(SessionSerializer(result.session).data)
    message = result.messages[0]
    assert render(message_dict(message)) == render(MessageSerializer(message).data)


@pytest.mark.skipif(bool(missing_tools()), reason="needs gunicorn and wrk")
def test_a_gthread_worker_closes_each_connection_after_its_response(tmp_path: Path):
    """gthread keeps no connection alive (docs/performance.md, "Load"): a kept-alive wrk
    connection stays with the worker that accepted it, and a run whose four connections all
    landed on one of two workers measured half the throughput of a 2/2 split."""
    import http.client

    from bench.http_load import Server

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.setdefault("BENCH_DATABASE_URL", f"{SERVER}/postgres")
    with Server("gthread", workers=1, threads=2, env=env, log=tmp_path / "g.log") as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        conn.request("GET", "/floor/sessions/count/")
        response = conn.getresponse()
        response.read()
        conn.close()
    assert response.getheader("Connection", "").lower() == "close"
