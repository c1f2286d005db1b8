"""``SessionFilters``: the one value every session list and count takes (docs/design.md §7.2)."""

from __future__ import annotations

import dataclasses

import pytest

from cortex_sessions import services
from cortex_sessions.exceptions import InvalidAgentId, InvalidFilter, InvalidInput
from cortex_sessions.services import SessionFilters

SCOPE = "org=acme/user=1"


def test_the_default_lists_every_live_session_of_the_scope():
    assert SessionFilters() == SessionFilters(
        agent_id=None,
        exact=False,
        default_only=False,
        search=None,
        archived=False,
        metadata=None,
        q=None,
    )


@pytest.mark.parametrize(
    ("fields", "error", "code", "field"),
    [
        ({"agent_id": "a\tb"}, InvalidAgentId, "invalid_agent_id", "agent_id"),
        ({"agent_id": ""}, InvalidAgentId, "invalid_agent_id", "agent_id"),
        ({"agent_id": 5}, InvalidAgentId, "invalid_agent_id", "agent_id"),
        ({"agent_id": "a\x00"}, InvalidInput, "nul_character", "agent_id"),
        ({"exact": 1}, InvalidFilter, "invalid_filter", "exact"),
        ({"exact": None}, InvalidFilter, "invalid_filter", "exact"),
        ({"default_only": "true"}, InvalidFilter, "invalid_filter", "default_only"),
        ({"search": 5}, InvalidFilter, "invalid_filter", "search"),
        ({"search": "a\x00"}, InvalidInput, "nul_character", "search"),
        ({"search": "\ud800"}, InvalidInput, "invalid_text", "search"),
        ({"archived": "any"}, InvalidFilter, "invalid_filter", "archived"),
        ({"archived": 0}, InvalidFilter, "invalid_filter", "archived"),
        ({"metadata": ["team", "red"]}, InvalidFilter, "invalid_filter", "metadata"),
        (
            {"metadata": {f"k{n}": n for n in range(11)}},
            InvalidFilter,
            "invalid_filter",
            "metadata",
        ),
        ({"metadata": {"team": "a\x00"}}, InvalidInput, "nul_character", "metadata"),
        ({"q": ""}, InvalidFilter, "invalid_filter", "q"),
        ({"q": " \t\n"}, InvalidFilter, "invalid_filter", "q"),
        ({"q": "x" * 1001}, InvalidFilter, "invalid_filter", "q"),
        ({"q": 5}, InvalidFilter, "invalid_filter", "q"),
        ({"q": "a\x00"}, InvalidInput, "nul_character", "q"),
    ],
)
def test_a_bad_field_is_refused_with_its_code_and_name_when_the_value_is_built(
    fields, error, code, field
):
    with pytest.raises(error) as info:
        SessionFilters(**fields)
    assert (info.value.code, info.value.field) == (code, field)


def test_replace_checks_the_new_value_too():
    filters = SessionFilters(agent_id="coder")
    assert dataclasses.replace(filters, default_only=True).default_only is True
    with pytest.raises(InvalidFilter):
        dataclasses.replace(filters, archived="yes")


def test_the_value_is_frozen_and_keeps_its_own_copy_of_metadata():
    given = {"team": "red"}
    filters = SessionFilters(metadata=given)
    given["team"] = "blue"
    assert filters.metadata == {"team": "red"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        filters.q = "invoice"  # type: ignore[misc]


def test_an_empty_title_search_is_no_filter():
    assert SessionFilters(search="") == SessionFilters()


@pytest.mark.parametrize(
    "service",
    [
        services.session_queryset,
        services.list_sessions,
        services.count_sessions,
        services.list_sessions_page,
    ],
)
def test_services_refuse_filters_that_are_not_session_filters(service):
    with pytest.raises(TypeError, match="SessionFilters"):
        service(scope=SCOPE, filters={"agent_id": "coder"})


@pytest.mark.django_db
def test_services_apply_every_field(session_factory):
    kept = session_factory(
        scope=SCOPE, agent_id="coder", title="Invoice sent", metadata={"team": "red"}
    )
    session_factory(scope=SCOPE, agent_id="other", title="Invoice sent", metadata={"team": "red"})
    session_factory(scope=SCOPE, agent_id="coder", title="Other", metadata={"team": "red"})
    session_factory(scope=SCOPE, agent_id="coder", title="Invoice sent", metadata={"team": "x"})
    session_factory(
        scope=SCOPE + "/team=t", agent_id="coder", title="Invoice sent", metadata={"team": "red"}
    )
    filters = SessionFilters(
        agent_id="coder", exact=True, search="invoice", metadata={"team": "red"}
    )

    assert [s.pk for s in services.list_sessions(scope=SCOPE, filters=filters)] == [kept.pk]
    assert services.count_sessions(scope=SCOPE, filters=filters) == 1
    page = services.list_sessions_page(scope=SCOPE, filters=filters)
    assert [s.pk for s in page.results] == [kept.pk]
    assert services.count_sessions(scope=SCOPE) == 5
    assert services.count_sessions(scope=SCOPE, filters=SessionFilters(default_only=True)) == 0
