"""An erasure killed with SIGKILL mid-transaction resumes to exact counts (docs/design.md §18.2).

Every step runs in a child process (``python -m tests.erasure_data``) on a database the test
shares with it: on PostgreSQL and MariaDB the test database (the test commits, so the children
see its rows), on SQLite a file of its own, migrated by a child.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.db import connection

from .erasure_data import scope_of, within

ROOT = Path(__file__).resolve().parent.parent


def _database_url(tmp_path: Path) -> str:
    if connection.vendor == "sqlite":
        return f"sqlite:///{tmp_path / 'erasure.sqlite3'}"
    parts = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(parts._replace(path="/" + connection.settings_dict["NAME"]))


def _child(url: str, *args: str, **popen: object) -> subprocess.Popen[str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"CORTEX_STRICT_ROUTER", "DJANGO_SETTINGS_MODULE"}
    }
    env.update(DATABASE_URL=url, PYTHONPATH=str(ROOT), DJANGO_SETTINGS_MODULE="tests.settings")
    return subprocess.Popen(
        [sys.executable, "-m", "tests.erasure_data", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        **popen,  # type: ignore[arg-type]
    )


def _run(url: str, *args: str) -> str:
    child = _child(url, *args)
    out, _ = child.communicate(timeout=300)
    assert child.returncode == 0, out
    return out


@pytest.mark.django_db(transaction=True)
def test_an_erasure_killed_inside_a_batch_resumes_to_exact_counts(tmp_path):
    url = _database_url(tmp_path)
    if connection.vendor == "sqlite":
        _run(url, "migrate")
    _run(url, "populate", "3")
    before = json.loads(_run(url, "snapshot"))

    eraser = _child(url, "erase", "org=acme", "2")
    assert eraser.stdout is not None
    line = eraser.stdout.readline()
    assert line.startswith("KILL ME "), line
    erasure_id = line.split()[-1]
    os.kill(eraser.pid, signal.SIGKILL)  # inside the second batch's open transaction
    eraser.wait(timeout=60)

    halfway = json.loads(_run(url, "snapshot"))
    killed_batch = sum(
        1
        for row in before["cortex_sessions.Session"]
        if row not in halfway["cortex_sessions.Session"]
    )
    assert killed_batch == 2  # the first batch only: the second was rolled back

    resumed = json.loads(_run(url, "resume", erasure_id, "2"))
    after = json.loads(_run(url, "snapshot"))
    deleted = {
        label: [row for pk, row in rows.items() if pk not in after[label]]
        for label, rows in before.items()
    }
    for label, rows in before.items():
        for pk, row in rows.items():
            in_scope = within(scope_of(label, row, before), "org=acme")
            assert (pk not in after[label]) == in_scope, (label, row)
            if not in_scope:
                assert after[label][pk] == row
    assert resumed["status"] == "done"
    assert resumed["counts"] == {label: len(rows) for label, rows in deleted.items() if rows}
    assert resumed["counts"]["cortex_sessions.Session"] == 10  # 2 users x (3 + 1 + 1)
