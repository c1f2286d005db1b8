"""What a request of the API builds once per class, not per request (docs/design.md §14.5):
the filterset's form class and fields, its filters' arguments, one session queryset per
list."""

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
    assert form.fields is not first.base_fields  # each form has its own dict of fields
    # ... of the class's own fields: no deep copy of every field and widget per request
    assert all(form.fields[name] is first.base_fields[name] for name in first.base_fields)


def test_a_filterset_copies_its_filters_shallowly():
    from django.http import QueryDict

    from cortex_sessions.api.filters import SessionFilter

    one, two = SessionFilter(QueryDict("agent_id=a")), SessionFilter(QueryDict("agent_id=b"))
    base = SessionFilter.base_filters["agent_id"]
    assert one.filters["agent_id"] is not two.filters["agent_id"] is not base
    assert one.filters["agent_id"].parent is one and two.filters["agent_id"].parent is two
    assert not hasattr(base, "parent")  # the class's filters are left alone
    # the copies share the field arguments (help text, schema) instead of deep-copying them
    assert one.filters["agent_id"].extra is base.extra
    assert one.is_valid() and two.is_valid()
    assert (one.session_filters.agent_id, two.session_filters.agent_id) == ("a", "b")

    class Narrower(SessionFilter):  # a host's subclass: django-filter's own deep copies
        pass

    narrower = Narrower(QueryDict("agent_id=c"))
    assert narrower.filters["agent_id"].extra is not Narrower.base_filters["agent_id"].extra
    assert narrower.is_valid() and narrower.session_filters.agent_id == "c"


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


def test_body_serializers_share_their_fields_unless_partial_or_given_a_context():
    from cortex_sessions.api.serializers import MessageInputSerializer, SessionUpdateSerializer

    first = MessageInputSerializer(data={"role": "user", "content": "a"})
    second = MessageInputSerializer(data={"role": "nope", "content": "b", "x": 1})
    assert first.fields is second.fields
    assert first.is_valid()
    assert not second.is_valid()
    assert sorted(second.errors) == ["role", "x"]  # each instance keeps its own errors
    assert first.validated_data["content"] == "a"
    partial = SessionUpdateSerializer(data={}, partial=True)
    assert partial.fields is not SessionUpdateSerializer(data={}, partial=True).fields
    assert partial.is_valid() and partial.validated_data == {}
    with_context = MessageInputSerializer(data={}, context={"k": 1})
    assert with_context.fields is not first.fields
