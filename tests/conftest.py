from __future__ import annotations

import os
import secrets

import pytest
from django.conf import settings
from django.db import connection, connections

from cortex_sessions.scope import Scope
from tests.factories import MessageFactory, SessionFactory
from tests.routers import STRICT_ALIAS

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
    parser.addoption(
        "--strict-replica-router",
        action="store_true",
        help=(
            "Run with tests.routers.StrictReplicaRouter: reads go to a mirror alias 'strict_replica', "
            "and a read routed inside an open transaction or without its scope hint fails "
            "(docs/design.md §17.1). CORTEX_STRICT_ROUTER=1 does the same."
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
    ``--hypothesis-seed`` was given), so the property tests replay with it as well. Under the
    strict replica router (docs/design.md §17.1) every test may use the alias ``replica``."""
    seed = parse_fuzz_seed(config.getoption("--fuzz-seed"))
    config.cortex_fuzz_seed = seed
    if seed is not None and getattr(config.option, "hypothesis_seed", None) is None:
        config.option.hypothesis_seed = str(seed)
    config.addinivalue_line(
        "markers",
        "strict_router_exempt(reason): skipped under --strict-replica-router, for the reason "
        "given (a test that installs its own router)",
    )
    if config.getoption("--strict-replica-router") and not settings.STRICT_REPLICA_ROUTER:
        raise pytest.UsageError(
            "--strict-replica-router must be on pytest's command line (tests/settings.py reads "
            "it there); or set CORTEX_STRICT_ROUTER=1."
        )
    if settings.STRICT_REPLICA_ROUTER:
        from django.test import TransactionTestCase

        # Every test may read through the router, so every test may use the mirror alias.
        TransactionTestCase.databases = {"default", STRICT_ALIAS}


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


@pytest.fixture(autouse=True, scope="session")
def _replica_shares_the_test_connection(request):
    """Under the strict router, ``strict_replica`` is ``default``'s very connection in the main thread
    (a test's uncommitted rows are visible to the reads routed there, as on one database);
    other threads open their own connection to the mirror, which sees what was committed."""
    if not settings.STRICT_REPLICA_ROUTER:
        return
    request.getfixturevalue("django_db_setup")
    connections[STRICT_ALIAS] = MirrorAlias(connections["default"])


class MirrorAlias:
    """``default``'s connection under the alias ``strict_replica``: every attribute read and written
    is the wrapped connection's (its transaction state included), but ``alias``, which Django
    compares with a subquery's ``QuerySet.using()``."""

    alias = STRICT_ALIAS

    def __init__(self, wrapped):
        object.__setattr__(self, "_wrapped", wrapped)

    def __getattr__(self, name):
        return getattr(self._wrapped, name)

    def __setattr__(self, name, value):
        setattr(self._wrapped, name, value)


def pytest_collection_modifyitems(config, items):
    """Skip the tests whose vendor marker (``VENDOR_MARKERS``) excludes this run's database,
    and under the strict router those marked ``strict_router_exempt``."""
    if settings.STRICT_REPLICA_ROUTER:
        for item in items:
            exempt = item.get_closest_marker("strict_router_exempt")
            if exempt is not None:
                reason = exempt.kwargs.get("reason") or (exempt.args or ["exempt"])[0]
                item.add_marker(pytest.mark.skip(reason=f"strict replica router: {reason}"))
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
