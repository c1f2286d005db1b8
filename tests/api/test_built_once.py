"""What a request of the API builds once per class, not per request (docs/design.md §14.3):
the filterset's form class, one session queryset per list."""

from __future__ import annotations

import pytest

from cortex_sessions import services


def test_the_filterset_form_class_is_built_once():
    from django.http import QueryDict

    from cortex_sessions.api.filters import SessionFilter

    first = SessionFilter(QueryDict("agent_id=a")).get_form_class()
    assert SessionFilter(QueryDict("q=b")).get_form_class() is first
    form = SessionFilter(QueryDict("agent_id=")).form
    assert not form.is_valid() or form.cleaned_data["agent_id"] == ""  # a form of its own
    assert form.fields is not first.base_fields  # each form copies the class's fields


@pytest.mark.parametrize("path", ["", "count/"])
def test_a_list_and_a_count_build_one_session_queryset(db, api, alice_scope, monkeypatch, path):
    from tests.api.conftest import BASE

    services.create_session(scope=alice_scope, agent_id="a")
    built = []
    original = services.session_queryset

    def counted(**kwargs):
        built.append(kwargs)
        return original(**kwargs)

    monkeypatch.setattr(services, "session_queryset", counted)
    response = api.get(f"{BASE}{path}?agent_id=a")
    assert response.status_code == 200
    assert len(built) == (1 if path == "" else 0)  # the count asks count_sessions
