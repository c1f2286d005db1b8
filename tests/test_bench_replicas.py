"""The bench's replica mode (``python -m bench.replicas``, issue 33 item 5): without a standby it
says so and measures nothing; with one (``CORTEX_REPLICA_URL``, as for tests/replicas/) it runs
at a tiny size and prints every read, way and the replay lag."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

psycopg = pytest.importorskip("psycopg")  # the bench drives psycopg 3 (its `bench` extra)

from bench import replicas  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _bench(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m bench.replicas`` in a process of its own (it sets Django up with the bench's
    settings, not the tests')."""
    # Without the tests' DJANGO_SETTINGS_MODULE, which pytest-django exports.
    inherited = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    return subprocess.run(
        [sys.executable, "-m", "bench.replicas", *args],
        cwd=ROOT,
        env={**inherited, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_without_a_standby_it_exits_with_a_clear_message():
    result = _bench({replicas.REPLICA_ENV: ""}, timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip() == replicas.NO_STANDBY
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_a_primary_named_as_the_standby_is_refused():
    server = os.environ.get("BENCH_SERVER_URL", "postgres://postgres@127.0.0.1:5432")
    try:
        psycopg.connect(f"{server}/postgres", connect_timeout=5).close()
    except psycopg.Error:
        pytest.skip(f"no PostgreSQL at {server}")
    result = _bench({replicas.REPLICA_ENV: f"{server}/postgres"}, timeout=120)
    assert result.returncode == 1
    assert "is not a standby (pg_is_in_recovery() is false)" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_standby_replica_url_names_the_bench_database():
    url = replicas.replica_database_url("postgres://postgres@127.0.0.1:5433/postgres", "b_x")
    assert url == "postgres://postgres@127.0.0.1:5433/b_x"


def test_percentile_is_the_nearest_rank():
    assert replicas.percentile([5.0, 1.0, 3.0, 2.0, 4.0], 0.95) == 5.0
    assert replicas.percentile(list(map(float, range(1, 101))), 0.95) == 95.0
    assert replicas.percentile([7.0], 0.5) == 7.0


@pytest.mark.skipif(
    not os.environ.get(replicas.REPLICA_ENV),
    reason="needs a streaming standby: set CORTEX_REPLICA_URL",
)
def test_a_tiny_run_against_the_standby_prints_every_read_and_the_lag(tmp_path):
    prefix = f"cortex_bench_t{os.getpid()}"
    database = f"{prefix}_replicas"
    server = os.environ.get("BENCH_SERVER_URL", "postgres://postgres@127.0.0.1:5432")
    try:
        result = _bench(
            {"BENCH_DB_PREFIX": prefix},
            *("--sessions", "200", "--appends", "30", "--output", str(tmp_path / "r.json")),
        )
    finally:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"{8 * 30:,} one-message appends" in out
    for read in replicas.READS:
        for way in replicas.WAYS:
            assert any(line.split()[:2] == [read, way] for line in out.splitlines()), (read, way)
    assert "replay lag (" in out
    saved = json.loads((tmp_path / "r.json").read_text())
    rows = {(row["read"], row["way"]): row for row in saved["reads"]}
    assert set(rows) == {(r, w) for r in replicas.READS for w in replicas.WAYS}
    for read in replicas.READS:
        assert rows[read, "primary"]["to_primary"] == 1.0  # pinned: never the replica
        assert rows[read, "primary"]["reads"] >= 1
    assert saved["lag"]["samples"] >= 1
