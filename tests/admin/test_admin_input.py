"""No changelist filter, search or action input answers 500, NUL bytes on PostgreSQL included,
and message lists count at most ``COUNT_LIMIT`` rows exactly (docs/design.md §12.5; case
``admin-nul-filter``)."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from cortex_sessions import services
from cortex_sessions.admin import changelists as cortex_admin
from cortex_sessions.models import Message
from tests.admin.helpers import changelist_url, flash_messages

pytestmark = pytest.mark.django_db

NUL = "\x00"

#: Every query-string input of each changelist: its filters, search, ordering and page.
INPUTS = {
    "session": [
        "is_default__exact",
        "backfilled",
        "agent_id",
        "agent_id__exact",
        "q",
        "o",
        "p",
        "created_at__year",
        "created_at__month",
        "created_at__day",
    ],
    "message": ["session", "role", "role__exact", "source", "source__exact", "o", "p"],
    "importedconversation": ["agent_id", "agent_id__exact", "q", "o", "p"],
}


@pytest.mark.parametrize(
    ("model", "parameter"),
    [(model, parameter) for model, parameters in INPUTS.items() for parameter in parameters],
)
@pytest.mark.parametrize("value", [NUL, f"a{NUL}b", "\ufffd", "x" * 2000, "-1", "☃"])
def test_no_changelist_input_is_a_server_error(
    admin_client, session_with_messages, model, parameter, value
):
    session_with_messages()

    response = admin_client.get(changelist_url(model), {parameter: value})

    assert response.status_code in (200, 302), (parameter, value, response.status_code)
    if NUL in value:
        assert response.status_code == 302
        assert response["Location"].endswith("?e=1")


@pytest.mark.parametrize("model", sorted(INPUTS))
def test_a_nul_in_a_parameter_name_is_refused(admin_client, model):
    response = admin_client.get(f"{changelist_url(model)}?role%00=user")
    assert response.status_code == 302


@pytest.mark.parametrize(
    "selection", [["not-a-number"], [NUL], ["1", f"2{NUL}"], ["99999999999999999999999"]]
)
def test_a_message_action_on_a_selection_that_is_not_an_id_is_an_error(
    admin_client, session_with_messages, selection
):
    session = session_with_messages()

    response = admin_client.post(
        changelist_url("message"),
        {"action": "delete_selected", "_selected_action": selection},
        follow=True,
    )

    assert response.status_code == 200
    assert any("invalid" in text or "NUL" in text for text in flash_messages(response))
    session.refresh_from_db()
    assert session.message_count == 3


@pytest.mark.parametrize(
    ("model_name", "field_name"),
    [("message", "session")],
)
@pytest.mark.parametrize("term", [NUL, f"a{NUL}b", "planner"])
def test_autocomplete_search_never_is_a_server_error(
    admin_client, session_with_messages, model_name, field_name, term
):
    """``/admin/autocomplete/`` runs the model admin's search outside the changelist, so a NUL
    there must be refused too (docs/design.md §12.5)."""
    session_with_messages()
    response = admin_client.get(
        "/admin/autocomplete/",
        {
            "term": term,
            "app_label": "cortex_sessions",
            "model_name": model_name,
            "field_name": field_name,
        },
    )
    assert response.status_code == 200
    if NUL in term:
        assert response.json()["results"] == []


def test_an_action_name_holding_nul_is_an_error(admin_client, session_with_messages):
    session = session_with_messages()
    response = admin_client.post(
        changelist_url(),
        {"action": f"make_default{NUL}", "_selected_action": [str(session.pk)]},
        follow=True,
    )
    assert response.status_code == 200
    session.refresh_from_db()
    assert session.is_default is False


def _unbounded_counts(queries) -> list[str]:
    table = Message._meta.db_table
    return [
        query["sql"]
        for query in queries
        if re.search(r"COUNT\(\*\)", query["sql"], re.IGNORECASE)
        and table in query["sql"]
        and not re.search(r"\bLIMIT\b", query["sql"], re.IGNORECASE)
    ]


def test_message_changelist_never_counts_the_whole_table(
    admin_client, session_with_messages, monkeypatch
):
    monkeypatch.setattr(cortex_admin, "COUNT_LIMIT", 4)
    for _ in range(3):
        session_with_messages()  # 9 messages, more than the limit

    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(changelist_url("message"))
        filtered = admin_client.get(changelist_url("message"), {"role": "user"})

    assert response.status_code == filtered.status_code == 200
    assert _unbounded_counts(queries.captured_queries) == []
    assert response.context["cl"].result_count >= 4
    assert filtered.context["cl"].result_count == 4  # 6 user messages, counted up to the limit


def test_counts_under_the_limit_are_exact(admin_client, session_with_messages):
    session = session_with_messages()
    services.append_messages(
        scope=session.scope, session_id=session.pk, messages=[{"role": "tool", "content": "x"}]
    )
    response = admin_client.get(changelist_url("message"))
    assert response.context["cl"].result_count == 4


def _app_changelists() -> list[str]:
    """The changelist URL name of every model this app (and its integrations) registers."""
    from django.contrib import admin

    return sorted(
        f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist"
        for model in admin.site._registry
        if model.__module__.startswith("cortex_sessions.")
    )


#: Lookups Django would hand to ``QuerySet.filter()`` unchecked: the database fails on
#: them (invalid regex, JSON lookups SQLite lacks, out-of-range numbers and dates).
UNDECLARED_LOOKUPS = [
    {"title__regex": "("},
    {"scope__regex": "("},
    {"seq__regex": "("},
    {"role__regex": "("},
    {"external_id__regex": "("},
    {"app_name__regex": "("},
    {"metadata__contains": "x"},
    {"content__contains": "{}"},
    {"id__gt": "99999999999999999999999"},
    {"created_at__gte": "not-a-date"},
    {"pk__in": "1,2"},
    {"nope": "1"},
]


@pytest.mark.parametrize("url_name", _app_changelists())
@pytest.mark.parametrize("params", UNDECLARED_LOOKUPS, ids=lambda p: next(iter(p)))
def test_a_lookup_no_declared_filter_offers_redirects_to_the_error_flag(
    admin_client, session_with_messages, url_name, params
):
    from django.urls import reverse

    session_with_messages()

    response = admin_client.get(reverse(url_name), params)

    assert response.status_code == 302, (url_name, params, response.status_code)
    assert response["Location"].endswith("?e=1")


@pytest.mark.parametrize(
    "params",
    [
        {"created_at__year": "99999999999"},
        {"created_at__year": "9999"},
        {"created_at__year": "9999", "created_at__month": "12", "created_at__day": "31"},
        {"created_at__year": "0"},
        {"created_at__year": "2026", "created_at__month": "13"},
    ],
)
def test_a_date_hierarchy_value_out_of_range_redirects_to_the_error_flag(
    admin_client, session_with_messages, params
):
    session_with_messages()

    response = admin_client.get(changelist_url("session"), params)

    assert response.status_code == 302, (params, response.status_code)
    assert response["Location"].endswith("?e=1")


def test_the_declared_filters_and_the_date_hierarchy_still_filter(
    admin_client, session_with_messages
):
    session = session_with_messages()
    year = session.created_at.year

    response = admin_client.get(
        changelist_url("session"),
        {
            "created_at__year": str(year),
            "agent_id__exact": "agent-1",
            "is_default__exact": str(int(session.is_default)),
        },
    )

    assert response.status_code == 200
    assert response.context["cl"].result_count == 1
    response = admin_client.get(changelist_url("session"), {"created_at__year": str(year - 1)})
    assert response.context["cl"].result_count == 0


def test_an_action_over_an_undeclared_lookup_redirects_and_deletes_nothing(
    admin_client, session_with_messages
):
    session_with_messages()

    response = admin_client.post(
        f"{changelist_url('message')}?seq__regex=(",
        {"action": "delete_selected", "select_across": "1", "index": "0", "_selected_action": []},
    )

    assert response.status_code == 302
    assert response["Location"].endswith("?e=1")
    assert Message.objects.count() == 3
