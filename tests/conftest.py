from __future__ import annotations

import os
import secrets

import pytest
from django.db import connection

from cortex_sessions.scope import Scope
from tests.factories import MessageFactory, SessionFactory

#: marker -> (the database vendors it runs on, why it is skipped elsewhere)
VENDOR_MARKERS = {
    "postgres_only": ({"postgresql"}, "needs PostgreSQL (set DATABASE_URL)"),
    "mysql_only": ({"mysql"}, "needs MySQL or MariaDB (set DATABASE_URL)"),
    "concurrent_db": (
        {"postgresql", "mysql"},
        "needs real concurrent transactions: PostgreSQL or MySQL/MariaDB (set DATABASE_URL)",
    ),
}


#: The environment variable ``--fuzz-seed`` defaults to.
FUZZ_SEED_VARIABLE = "CORTEX_FUZZ_SEED"


def pytest_addoption(parser):
    parser.addoption(
        "--fuzz-seed",
        default=os.environ.get(FUZZ_SEED_VARIABLE) or None,
        metavar="random|N",
        help=(
            "Seed of the schemathesis runs (tests/api/test_schema.py) and of every other "
            "hypothesis test: an integer, or 'random' for a new one; the seed is printed at "
            f"the start and the end of the run. Default: ${FUZZ_SEED_VARIABLE}; without it "
            "the schemathesis runs are derandomized (the same examples every run)."
        ),
    )


def parse_fuzz_seed(value: str | None) -> int | None:
    """The seed ``--fuzz-seed`` names: ``None`` for none, a fresh one for ``random``.

    Raises:
        pytest.UsageError: neither an integer nor ``random``.
    """
    if value is None or value == "":
        return None
    if value.strip().lower() == "random":
        return secrets.randbelow(2**32)
    try:
        return int(value)
    except ValueError:
        raise pytest.UsageError(
            f"--fuzz-seed (or ${FUZZ_SEED_VARIABLE}) must be an integer or 'random', not {value!r}."
        ) from None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """Choose the run's fuzz seed once; hand it to hypothesis's own seed option too (unless
    ``--hypothesis-seed`` was given), so the property tests replay with it as well."""
    seed = parse_fuzz_seed(config.getoption("--fuzz-seed"))
    config.cortex_fuzz_seed = seed
    if seed is not None and getattr(config.option, "hypothesis_seed", None) is None:
        config.option.hypothesis_seed = str(seed)


def _fuzz_seed_line(config) -> str:
    seed = config.cortex_fuzz_seed
    if seed is None:
        return "fuzz seed: none (derandomized; --fuzz-seed=random|N explores)"
    return f"fuzz seed: {seed} (replay: --fuzz-seed={seed} or {FUZZ_SEED_VARIABLE}={seed})"


def pytest_report_header(config):
    return _fuzz_seed_line(config)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Print the seed again at the end, next to the failures it replays."""
    terminalreporter.write_line(_fuzz_seed_line(config))


@pytest.fixture(scope="session")
def fuzz_seed(pytestconfig) -> int | None:
    """The run's fuzz seed (``--fuzz-seed``), or ``None``: derandomized."""
    return pytestconfig.cortex_fuzz_seed


def pytest_collection_modifyitems(config, items):
    """Skip the tests whose vendor marker (``VENDOR_MARKERS``) excludes this run's database."""
    for marker, (vendors, reason) in VENDOR_MARKERS.items():
        if connection.vendor in vendors:
            continue
        skip = pytest.mark.skip(reason=reason)
        for item in items:
            if marker in item.keywords:
                item.add_marker(skip)


@pytest.fixture
def scope() -> Scope:
    return Scope.parse("org=acme/user=1")


@pytest.fixture
def session_factory():
    return SessionFactory


@pytest.fixture
def message_factory():
    return MessageFactory
