"""The supported Python × Django matrix, each combination's test suite on SQLite: ``nox``.

Combinations (Django 6.0 and 6.1 need Python 3.12 or later):

- Django 5.2 LTS on Python 3.11, 3.12 and 3.13;
- Django 6.0 on Python 3.12 and 3.13;
- Django 6.1 on Python 3.12 and 3.13.

Each combination installs the lean ``test`` extra and one Django (the integrations, the demo, the
browser and schemathesis are extras whose tests skip without them; ``.ci/run`` runs them in its
full environment), and runs the core suite quietly.

``nox`` needs the interpreters as ``python3.11`` … ``python3.13`` on ``PATH``; the versions a
pyenv installed (``$PYENV_ROOT/versions/*/bin``, default ``~/.pyenv``) are added to it, so a
machine with pyenv needs no shims. ``nox`` runs the matrix; ``nox -l`` lists every session and
``nox -s "tests(3.13-django6.1)"`` runs one. Extra arguments go to pytest (``nox -- -x``).

``nox -s psycopg2`` (not in the default run: it needs a PostgreSQL server, at
``CI_PSYCOPG2_URL``) runs the suite on PostgreSQL through psycopg 2, the driver Django uses
when psycopg 3 is not installed. ``.ci/run`` runs both; its other database runs stay there.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

import nox

DJANGO = {"5.2": "Django>=5.2,<5.3", "6.0": "Django>=6.0,<6.1", "6.1": "Django>=6.1,<6.2"}
MATRIX = [
    ("3.11", "5.2"),
    ("3.12", "5.2"),
    ("3.12", "6.0"),
    ("3.12", "6.1"),
    ("3.13", "5.2"),
    ("3.13", "6.0"),
    ("3.13", "6.1"),
]

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = False
nox.options.error_on_missing_interpreters = True  # a missing Python is a failure, not a skip
nox.options.sessions = ["tests"]  # the matrix; psycopg2 needs a server and is asked for by name


def _add_pyenv_interpreters() -> None:
    """Put every pyenv-installed interpreter's ``bin`` on ``PATH`` (after what is there)."""
    root = Path(os.environ.get("PYENV_ROOT") or Path("~/.pyenv").expanduser())
    found = sorted(glob.glob(str(root / "versions" / "*" / "bin")), reverse=True)
    path = os.environ.get("PATH", "").split(os.pathsep)
    os.environ["PATH"] = os.pathsep.join([*path, *(d for d in found if d not in path)])


_add_pyenv_interpreters()


@nox.session
@nox.parametrize(("python", "django"), MATRIX, ids=[f"{p}-django{d}" for p, d in MATRIX])
def tests(session: nox.Session, django: str) -> None:
    """Install the app with the lean test extra and one Django; run pytest on SQLite."""
    session.install("-e", ".[test]", DJANGO[django])
    session.run(
        "python",
        "-c",
        "import django, sys; print('Django', django.get_version(), 'on', sys.version)",
    )
    env = {"DATABASE_URL": ""}  # SQLite; tests/settings.py treats an empty URL as unset
    session.run("pytest", "-q", "-p", "no:cacheprovider", *session.posargs, env=env)


@nox.session(python="3.11")
def psycopg2(session: nox.Session) -> None:
    """The suite on PostgreSQL through psycopg 2 (Django 5.2): with only psycopg 2 installed
    the app serves its hot paths with the ORM (``services._pg.enabled``). The database is
    ``CI_PSYCOPG2_URL`` (default: a ``cortex_sessions_psycopg2`` database on the local
    server); the runtime adapters, schemathesis and the demo are installed too (so their tests
    run here), and the bench's tests, which drive psycopg 3, skip."""
    session.install("-e", ".[test,fuzz,demo,openai-agents,adk]", "psycopg2-binary", DJANGO["5.2"])
    session.run("python", "-m", "pip", "uninstall", "--yes", "--quiet", "psycopg", "psycopg-binary")
    session.run(
        "python",
        "-c",
        "import psycopg2; from django.db.backends.postgresql import psycopg_any as p; "
        "assert not p.is_psycopg3; print('psycopg 2:', psycopg2.__version__)",
    )
    url = os.environ.get(
        "CI_PSYCOPG2_URL", "postgres://postgres@127.0.0.1:5432/cortex_sessions_psycopg2"
    )
    env = {"DATABASE_URL": url}
    session.run("pytest", "-q", "-p", "no:cacheprovider", *session.posargs, env=env)
