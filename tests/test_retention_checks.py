"""The ``RETENTION`` setting's system checks, ``cortex_sessions.E023`` and ``E024``
(docs/design.md §18.1)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from cortex_sessions.checks import check_settings
from cortex_sessions.retention import Policy, parse_policies

GOOD = {"scope": "org=acme", "after": 86_400, "action": "delete"}


def ids(retention):
    with override_settings(CORTEX_SESSIONS={"RETENTION": retention}):
        return [message.id for message in check_settings()]


@pytest.mark.parametrize(
    "retention",
    [
        [],
        [GOOD],
        [{**GOOD, "agent_id": "bot", "action": "archive"}, {**GOOD, "scope": "org=x/user=1"}],
        ({**GOOD, "after": 1},),
    ],
)
def test_good_policies_pass(retention):
    assert ids(retention) == []


@pytest.mark.parametrize(
    ("retention", "expected"),
    [
        ({"scope": "org=acme"}, ["cortex_sessions.E023"]),  # not a list
        ("org=acme", ["cortex_sessions.E023"]),
        (None, ["cortex_sessions.E023"]),
        (["org=acme"], ["cortex_sessions.E023"]),  # a policy not a dict
        ([{**GOOD, "action": "purge"}], ["cortex_sessions.E023"]),
        ([{**GOOD, "action": None}], ["cortex_sessions.E023"]),
        ([{**GOOD, "after": -1}], ["cortex_sessions.E023"]),
        ([{**GOOD, "after": 0}], ["cortex_sessions.E023"]),
        ([{**GOOD, "after": 1.5}], ["cortex_sessions.E023"]),
        ([{**GOOD, "after": "86400"}], ["cortex_sessions.E023"]),
        ([{**GOOD, "after": True}], ["cortex_sessions.E023"]),
        # more than 1,000 years: the sweep could not subtract it from now
        ([{**GOOD, "after": 10**11}], ["cortex_sessions.E023"]),
        ([{**GOOD, "after": 2**63}], ["cortex_sessions.E023"]),
        ([{**GOOD, "ttl": 5}], ["cortex_sessions.E023"]),  # unknown key
        ([{"scope": "org=acme", "action": "delete"}], ["cortex_sessions.E023"]),  # no after
        ([{**GOOD, "agent_id": ""}], ["cortex_sessions.E023"]),
        ([{**GOOD, "scope": "org=acme/"}], ["cortex_sessions.E024"]),
        ([{**GOOD, "scope": "acme"}], ["cortex_sessions.E024"]),
        ([{**GOOD, "scope": ""}], ["cortex_sessions.E024"]),  # never "everything"
        ([{**GOOD, "scope": 7}], ["cortex_sessions.E024"]),
        (
            [GOOD, {**GOOD, "action": "x"}, {**GOOD, "scope": "bad scope"}],
            ["cortex_sessions.E023", "cortex_sessions.E024"],
        ),
    ],
)
def test_each_bad_policy_is_reported_with_its_id(retention, expected):
    assert ids(retention) == expected


def test_the_error_names_the_policy_and_check_command_fails():
    with override_settings(CORTEX_SESSIONS={"RETENTION": [GOOD, {**GOOD, "after": -5}]}):
        (message,) = check_settings()
        assert "RETENTION[1]['after'] is -5" in message.msg
        with pytest.raises(SystemCheckError, match=r"cortex_sessions\.E023"):
            call_command("check", stdout=StringIO(), stderr=StringIO())


def test_policies_parse_to_canonical_values():
    assert parse_policies([{**GOOD, "agent_id": "bot"}]) == [
        Policy(scope="org=acme", agent_id="bot", after=86_400, action="delete")
    ]
