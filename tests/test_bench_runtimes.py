"""The runtimes bench (``python -m bench.runtimes``): at a tiny size its LangGraph, LangChain and
Pydantic AI pairs print a row per operation with its ratio, or a peer that is not installed as
skipped (needs PostgreSQL; skipped otherwise). Speed itself is the bench's to print, not
asserted here."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

psycopg = pytest.importorskip("psycopg")  # the bench drives psycopg 3 (its `bench` extra)
pytest.importorskip("langgraph.checkpoint.base")
pytest.importorskip("pydantic_ai")

ROOT = Path(__file__).resolve().parent.parent
SERVER = os.environ.get("BENCH_SERVER_URL", "postgres://postgres@127.0.0.1:5432")
PAIRS = {
    "langgraph": (
        "langgraph.checkpoint.postgres",
        "CortexCheckpointSaver vs PostgresSaver",
        ["get_tuple (latest)", "list a thread", "put_writes (2 writes)", "put (1 new message)"],
    ),
    "langchain": (
        "langchain_postgres",
        "CortexChatMessageHistory vs PostgresChatMessageHistory",
        ["add_messages (a turn: 2)", "messages (all 20)"],
    ),
    "pydantic-ai": (
        "pydantic_ai",
        "Pydantic AI save/load vs plain-SQL floor (no SDK store)",
        ["save a run (2 messages)", "load history (20)"],
    ),
}


@pytest.fixture(scope="module")
def database() -> str:
    try:
        psycopg.connect(f"{SERVER}/postgres", connect_timeout=5).close()
    except psycopg.Error:
        pytest.skip(f"no PostgreSQL at {SERVER}")
    name = f"cortex_bench_t{os.getpid()}_runtimes"
    yield name
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _bench(database: str, *args: str) -> str:
    """``python -m <args>`` on ``database``, as a user runs it; its standard output."""
    # Without the tests' DJANGO_SETTINGS_MODULE, which pytest-django exports.
    inherited = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        env={**inherited, "PYTHONPATH": str(ROOT), "BENCH_RUNTIMES_DATABASE": database},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_newer_adapters_are_printed_side_by_side_with_their_peers(database: str):
    only = [arg for name in PAIRS for arg in ("--only", name)]
    lines = _bench(database, "bench.runtimes", "--items", "20", "--reps", "3", *only).splitlines()
    for name, (module, pair, operations) in PAIRS.items():
        rows = [line for line in lines if line.startswith(f"| {pair} |")]
        if importlib.util.find_spec(module) is None:
            assert rows == []
            assert any(line.startswith(f"{name}: skipped, not installed") for line in lines)
            continue
        assert len(rows) == len(operations), rows
        for row, operation in zip(rows, operations, strict=True):
            assert row.split(" | ")[1].startswith(operation), row
        for row in rows:
            cells = [cell.strip() for cell in row.strip("|").split("|")]
            assert float(cells[2]) > 0 and float(cells[3]) > 0
            # the ratio of the unrounded figures: within rounding of the printed ones'
            ratio = float(cells[2]) / float(cells[3])
            assert abs(float(cells[4].rstrip("×")) - ratio) <= 0.01 + 0.01 * ratio, row
    assert not any("CortexSession vs" in line for line in lines)  # --only left the others out


def test_the_append_floor_prints_the_sdk_store_the_floor_and_the_adapter(database: str):
    """``python -m bench.append_floor``: three rows, each ratio that of the printed figures;
    the floor's statement kept the session's counters (the bench asserts it before printing)."""
    pytest.importorskip("langchain_postgres")
    printed = _bench(database, "bench.append_floor", "--reps", "3")
    rows = {
        cells[0]: [float(cell.split("×")[0]) for cell in cells[1:4]]
        for line in printed.splitlines()
        if line.startswith("| ") and not line.startswith(("| append", "|---"))
        for cells in [[cell.strip() for cell in line.strip("|").split("|")]]
    }
    names = ["SDK store (bare INSERT)", "floor (the design's work, raw SQL)", "adapter"]
    assert list(rows) == names, printed
    store, floor, adapter = (rows[name][0] for name in names)
    assert min(store, floor, adapter) > 0
    for name, ms in zip(names, (store, floor, adapter), strict=True):
        by_store, by_floor = rows[name][1:]
        assert abs(by_store - ms / store) <= 0.01 + 0.01 * by_store, name
        assert abs(by_floor - ms / floor) <= 0.01 + 0.01 * by_floor, name
