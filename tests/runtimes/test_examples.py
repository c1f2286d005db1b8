"""The documented examples run as the docs say: ``migrate``, then ``python -m …`` (no network).

docs/openai-agents.md, docs/adk.md, docs/langchain.md, docs/langgraph.md and docs/pydantic-ai.md
point at these modules; this runs them as a reader would, in a fresh process on a fresh SQLite
database of the example project.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    connection.vendor != "sqlite", reason="runs once, on the SQLite pass of the suite"
)


@pytest.fixture(scope="module")
def example_env(tmp_path_factory):
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    env["CORTEX_SQLITE_PATH"] = str(tmp_path_factory.mktemp("example") / "db.sqlite3")
    env["DJANGO_SETTINGS_MODULE"] = "example_project.settings"
    env["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=300,
    )
    return env


@pytest.mark.parametrize(
    ("module", "sdk", "expected"),
    [
        (
            "example_project.runtimes.openai_agents_example",
            "agents",
            "answers: ['San Francisco.', 'California.']",
        ),
        (
            "example_project.runtimes.adk_example",
            "google.adk",
            "the model's second request: ['Which city is the Golden Gate Bridge in?', "
            "'San Francisco.', 'And which state?']",
        ),
        (
            "example_project.runtimes.langchain_example",
            "langchain_core",
            "the model's second prompt: ['Answer in one line.', "
            "'Which city is the Golden Gate Bridge in?', 'San Francisco.', 'And which state?']",
        ),
        (
            "example_project.runtimes.langgraph_example",
            "langgraph",
            "the model's second prompt: ['Which city is the Golden Gate Bridge in?', "
            "'San Francisco.', 'And which state?']",
        ),
        (
            "example_project.runtimes.pydantic_ai_example",
            "pydantic_ai",
            "the model's second prompt: ['Which city is the Golden Gate Bridge in?', "
            "'San Francisco.', 'And which state?']",
        ),
    ],
)
def test_example_runs_as_documented(example_env, module, sdk, expected):
    pytest.importorskip(sdk)
    result = subprocess.run(
        [sys.executable, "-m", module],
        cwd=ROOT,
        env=example_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert expected in result.stdout
    assert "last message 'California.'" in result.stdout
