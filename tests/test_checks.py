"""System checks of the settings (docs/design.md §9) and the migration history (docs/design.md §4)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection
from django.test import override_settings

from cortex_sessions.checks import check_database_collation, check_settings
from cortex_sessions.conf import app_settings
from cortex_sessions.models import Session


def ids(**settings):
    with override_settings(CORTEX_SESSIONS=settings):
        return [message.id for message in check_settings()]


NOT_CALLABLE = 42


def test_default_settings_pass_every_check():
    assert ids() == []


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"SCOPE_RESOLVER": "no.such.module.resolver"}, "cortex_sessions.E002"),
        ({"SCOPE_RESOLVER": "tests.test_checks.NOT_CALLABLE"}, "cortex_sessions.E002"),
        ({"MAX_SCOPE_DEPTH": 0}, "cortex_sessions.E003"),
        ({"MAX_SCOPE_DEPTH": 9}, "cortex_sessions.E003"),
        ({"MAX_SCOPE_DEPTH": "3"}, "cortex_sessions.E003"),
        ({"LAST_MESSAGE_PREVIEW_CHARS": 0}, "cortex_sessions.E004"),
        ({"MAX_MESSAGE_BYTES": -1}, "cortex_sessions.E004"),
        ({"MAX_REFERENCE_BYTES": True}, "cortex_sessions.E004"),
        ({"CANDIDATE_LIMIT": 1.5}, "cortex_sessions.E004"),
        ({"PAGE_SIZE": 2000}, "cortex_sessions.E005"),
        ({"MAX_REFERENCES": 4}, "cortex_sessions.E006"),
        ({"MAX_REFERENCES": 0}, "cortex_sessions.E006"),
        ({"PREPARED_STATEMENTS": "yes"}, "cortex_sessions.E010"),
        ({"PREPARED_STATEMENTS": 1}, "cortex_sessions.E010"),
        ({"UNKNOWN_KEY": 1}, "cortex_sessions.W001"),
        ({"MAX_MESSAGES_PER_APPEND": 1}, "cortex_sessions.E018"),
        ({"MAX_MESSAGES_PER_APPEND": 0}, "cortex_sessions.E018"),
        ({"MAX_MESSAGES_PER_APPEND": "1000"}, "cortex_sessions.E018"),
        ({"MAX_MESSAGES_PER_APPEND": True}, "cortex_sessions.E018"),
        ({"MAX_MESSAGES_PER_APPEND": 2.5}, "cortex_sessions.E018"),
        ({"MAX_JSON_KEYS": 99}, "cortex_sessions.E019"),
        ({"MAX_JSON_KEYS": None}, "cortex_sessions.E019"),
        ({"MAX_JSON_KEYS": 1000.0}, "cortex_sessions.E019"),
    ],
)
def test_each_bad_setting_is_reported_with_its_id(settings, expected):
    assert ids(**settings) == [expected]


@pytest.mark.parametrize(
    "settings",
    [
        {"MAX_SCOPE_DEPTH": 1},
        {"MAX_SCOPE_DEPTH": 8},
        {"MAX_REFERENCES": 1},
        {"MAX_REFERENCES": 3},
        {"IDEMPOTENCY_TTL": 1},
        {"PAGE_SIZE": 1},
    ],
)
def test_integer_settings_at_their_bounds_pass(settings):
    assert ids(**settings) == []


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"MAX_SCOPE_DEPTH": 9}, "CORTEX_SESSIONS['MAX_SCOPE_DEPTH'] is 9."),
        ({"SEARCH_CANDIDATES": True}, "CORTEX_SESSIONS['SEARCH_CANDIDATES'] is True."),
        (
            {"MAX_REFERENCES": 0},
            "CORTEX_SESSIONS['MAX_REFERENCES'] is 0; session references would fail with "
            "SESSION_REFERENCE_INVALID_CONFIG.",
        ),
        (
            {"IDEMPOTENCY_TTL": "1"},
            "CORTEX_SESSIONS['IDEMPOTENCY_TTL'] is '1'; Idempotency-Key replays and "
            "cortex_sessions_prune need a lifetime in seconds.",
        ),
        ({"MAX_JSON_KEYS": 99}, "CORTEX_SESSIONS['MAX_JSON_KEYS'] is 99."),
    ],
)
def test_an_integer_setting_error_names_the_value_and_what_it_breaks(settings, message):
    with override_settings(CORTEX_SESSIONS=settings):
        assert [error.msg for error in check_settings()] == [message]


@pytest.mark.parametrize(
    "settings",
    [{"MAX_MESSAGES_PER_APPEND": 2}, {"MAX_JSON_KEYS": 100}, {"MAX_MESSAGES_PER_APPEND": 10**6}],
)
def test_the_smallest_request_bounds_pass(settings):
    assert ids(**settings) == []


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"MAX_MESSAGES_PER_APPEND": 1}, r"cortex_sessions\.E018"),
        ({"MAX_JSON_KEYS": 10}, r"cortex_sessions\.E019"),
    ],
)
def test_check_command_fails_on_a_bad_request_bound(settings, expected):
    with (
        override_settings(CORTEX_SESSIONS=settings),
        pytest.raises(SystemCheckError, match=expected),
    ):
        call_command("check", stdout=StringIO(), stderr=StringIO())


def test_settings_that_are_not_a_dict_are_e001():
    with override_settings(CORTEX_SESSIONS=["MAX_SCOPE_DEPTH", 3]):
        assert [m.id for m in check_settings()] == ["cortex_sessions.E001"]


def test_check_command_fails_at_start_up_on_a_bad_setting():
    with (
        override_settings(CORTEX_SESSIONS={"MAX_SCOPE_DEPTH": 0}),
        pytest.raises(SystemCheckError, match=r"cortex_sessions\.E003"),
    ):
        call_command("check", stdout=StringIO(), stderr=StringIO())


def test_settings_are_read_live():
    assert app_settings.PAGE_SIZE == 50
    with override_settings(CORTEX_SESSIONS={"PAGE_SIZE": 7}):
        assert app_settings.PAGE_SIZE == 7
    assert app_settings.PAGE_SIZE == 50


@pytest.mark.django_db
def test_every_model_change_has_a_migration():
    out = StringIO()
    call_command("makemigrations", "cortex_sessions", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


@pytest.mark.django_db
def test_database_checks_raise_no_warning_about_partial_indexes():
    """``PartialIndex`` picks its MySQL/MariaDB form itself, so ``migrate`` and
    ``check --database`` never print ``models.W037`` (docs/design.md §15.3)."""
    messages = run_checks(databases=["default"])
    assert [message.id for message in messages if message.id == "models.W037"] == []


@pytest.mark.django_db(transaction=True)
def test_a_general_ci_title_collation_is_warned_of_on_mysql():
    """On MySQL/MariaDB a ``*_general_ci`` title column makes every emoji match any other in
    the title search; elsewhere the check has nothing to say (docs/design.md §15.6)."""
    assert [m.id for m in check_database_collation(databases=["default"])] == []
    if connection.vendor != "mysql":
        return
    table = Session._meta.db_table

    def set_title_collation(collation: str) -> None:
        charset = collation.split("_", 1)[0]
        with connection.cursor() as cursor:
            cursor.execute(
                f"ALTER TABLE {table} MODIFY title {column_type} CHARACTER SET {charset} "
                f"COLLATE {collation} NOT NULL"
            )

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT column_type, collation_name FROM information_schema.columns "
            "WHERE table_schema = DATABASE() AND table_name = %s AND column_name = 'title'",
            [table],
        )
        column_type, original = cursor.fetchone()
    found = {}
    try:
        for collation in [
            "utf8mb4_general_ci",
            "utf8mb4_general_nopad_ci",
            "utf8mb3_general_ci",
            "latin1_swedish_ci",
            "utf8mb4_unicode_ci",
        ]:
            set_title_collation(collation)
            found[collation] = [m.id for m in check_database_collation(databases=["default"])]
    finally:
        set_title_collation(original)
    assert found == {
        "utf8mb4_general_ci": ["cortex_sessions.W015"],
        "utf8mb4_general_nopad_ci": ["cortex_sessions.W015"],
        "utf8mb3_general_ci": ["cortex_sessions.W016", "cortex_sessions.W015"],
        "latin1_swedish_ci": ["cortex_sessions.W016"],
        "utf8mb4_unicode_ci": [],
    }


def test_app_settings_follow_every_change_of_the_setting(settings):
    # The CORTEX_SESSIONS dict is remembered between reads and forgotten on setting_changed.
    assert app_settings.PAGE_SIZE == 50
    with override_settings(CORTEX_SESSIONS={"PAGE_SIZE": 7}):
        assert app_settings.PAGE_SIZE == 7
    assert app_settings.PAGE_SIZE == 50
    settings.CORTEX_SESSIONS = {"PAGE_SIZE": 9}  # pytest-django sends setting_changed too
    assert app_settings.PAGE_SIZE == 9
    settings.CORTEX_SESSIONS["PAGE_SIZE"] = 11  # the same dict, changed in place
    assert app_settings.PAGE_SIZE == 11
