"""docs/context-window.md's example runs as documented: ``migrate``, then ``python -m …``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    connection.vendor != "sqlite", reason="runs once, on the SQLite pass of the suite"
)


def test_context_window_example_prints_what_the_docs_show(tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    env["CORTEX_SQLITE_PATH"] = str(tmp_path / "db.sqlite3")
    env["DJANGO_SETTINGS_MODULE"] = "example_project.settings"
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=300,
    )
    result = subprocess.run(
        [sys.executable, "-m", "example_project.context_window_example"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    documented = (ROOT / "docs" / "context-window.md").read_text()
    output = result.stdout.strip()
    assert output, result.stderr
    assert output in documented, output
