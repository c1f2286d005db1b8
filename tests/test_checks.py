"""System checks of the settings (docs/design.md §9) and the migration history (docs/design.md §4)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from cortex_sessions.checks import check_settings
from cortex_sessions.conf import app_settings


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
    ],
)
def test_each_bad_setting_is_reported_with_its_id(settings, expected):
    assert ids(**settings) == [expected]


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
