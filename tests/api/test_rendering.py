"""The response serializers' planned rendering writes what DRF's own ``to_representation``
writes, byte for byte (docs/design.md §14.5)."""

from __future__ import annotations

import datetime
import uuid
import zoneinfo
from types import SimpleNamespace

import pytest
from django.test import override_settings
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st
from rest_framework import serializers
from rest_framework.renderers import JSONRenderer

from cortex_sessions import services
from cortex_sessions.api import serializers as api
from cortex_sessions.api.serializers.rendering import PlannedRepresentationMixin, iso_datetime

RESPONSE_SERIALIZERS = [
    api.SessionSerializer,
    api.ListedSessionSerializer,
    api.SearchMatchSerializer,
    api.CountSerializer,
    api.MessageSerializer,
    api.ListedMessageSerializer,
    api.MessageAppendResultSerializer,
    api.MessagesDeletedSerializer,
    api.PoppedMessageSerializer,
    api.MessagePageSerializer,
    api.ContextWindowSerializer,
]


def _drf(serializer_class: type, instance: object) -> bytes:
    """What DRF's ``Serializer.to_representation`` writes, nested serializers included (the
    plan switched off for the call)."""
    plans = PlannedRepresentationMixin._render_plans
    saved = dict(plans)
    try:
        for cls in RESPONSE_SERIALIZERS:
            plans[cls] = None
        return JSONRenderer().render(serializer_class(instance).data)
    finally:
        plans.clear()
        plans.update(saved)


def _planned(serializer_class: type, instance: object) -> bytes:
    return JSONRenderer().render(serializer_class(instance).data)


@pytest.mark.parametrize("serializer_class", RESPONSE_SERIALIZERS)
def test_every_response_serializer_has_a_plan(serializer_class):
    # Without one, every response built its fields on every request.
    assert serializer_class.render_plan() is not None


@pytest.fixture
def rows(db):
    live = services.create_session(
        scope="org=a/user=1", agent_id="bot", title="Café ☕", metadata={"k": [1, "é", None]}
    )
    result = services.append_messages(
        scope="org=a",
        session_id=live.id,
        messages=[
            {"role": "user", "content": "hi \u2028 there"},
            {"role": "tool", "content": [{"type": "text", "text": "42"}], "metadata": {"n": 1.5}},
        ],
    )
    fork = services.fork_session(scope="org=a", session_id=live.id, up_to_seq=1)
    archived = services.archive_session(scope="org=a", session_id=fork.id)
    return SimpleNamespace(session=result.session, archived=archived, messages=result.messages)


def _sessions(rows):
    matched = services.get_session(scope="org=a", session_id=rows.session.id)
    matched.search_hit = {"snippet": "<mark>hi</mark>", "seq": 1, "rank": 0.25}
    title_only = services.get_session(scope="org=a", session_id=rows.archived.id)
    title_only.search_hit = {"snippet": "Caf", "seq": None}
    return [rows.session, rows.archived, matched, title_only]


def _cases(rows):
    sessions = _sessions(rows)
    first, second = rows.messages
    searched = services.list_messages(scope="org=a", session_id=rows.session.id, limit=5)[0]
    searched.search_hit = {"snippet": "x", "seq": 1}
    page = {"results": [first, second, searched], "has_more": True, "next": "http://t/?a=1"}
    return [
        *((api.SessionSerializer, s) for s in sessions),
        *((api.ListedSessionSerializer, s) for s in sessions),
        (api.SearchMatchSerializer, sessions[2].search_match),
        (api.CountSerializer, {"count": 7}),
        (api.MessageSerializer, first),
        (api.ListedMessageSerializer, searched),
        (api.MessageAppendResultSerializer, {"session": rows.session, "messages": rows.messages}),
        (api.MessagesDeletedSerializer, {"session": rows.archived, "deleted": 2}),
        (api.PoppedMessageSerializer, {"session": rows.session, "message": second}),
        (api.MessagePageSerializer, page),
        (api.MessagePageSerializer, {"results": [], "has_more": False, "next": None}),
        (
            api.ContextWindowSerializer,
            services.context_messages(scope="org=a", session_id=rows.session.id),
        ),
    ]


def test_planned_output_is_drfs_byte_for_byte(rows):
    for serializer_class, instance in _cases(rows):
        assert _planned(serializer_class, instance) == _drf(serializer_class, instance)


def test_a_list_is_rendered_as_drf_renders_it(rows):
    sessions = _sessions(rows)
    planned = JSONRenderer().render(api.ListedSessionSerializer(sessions, many=True).data)
    assert planned == _drf_many(sessions)


def _drf_many(sessions):
    plans = PlannedRepresentationMixin._render_plans
    saved = dict(plans)
    try:
        for cls in RESPONSE_SERIALIZERS:
            plans[cls] = None
        return JSONRenderer().render(api.ListedSessionSerializer(sessions, many=True).data)
    finally:
        plans.clear()
        plans.update(saved)


@pytest.mark.parametrize(
    "context",
    [
        lambda: timezone.override(zoneinfo.ZoneInfo("Asia/Kathmandu")),
        lambda: override_settings(REST_FRAMEWORK={"DATETIME_FORMAT": "%Y-%m-%d %H:%M"}),
        lambda: override_settings(REST_FRAMEWORK={"DATETIME_FORMAT": None}),
        lambda: override_settings(REST_FRAMEWORK={"COERCE_BIGINT_TO_STRING": True}),
    ],
    ids=["another current time zone", "a strftime format", "no format", "bigint as string"],
)
def test_a_hosts_time_zone_and_datetime_format_are_honoured(rows, context):
    with context():
        for serializer_class, instance in _cases(rows):
            assert _planned(serializer_class, instance) == _drf(serializer_class, instance)


def test_a_serializer_with_a_field_reading_its_parent_is_rendered_by_drf():
    class Described(PlannedRepresentationMixin, serializers.Serializer):
        name = serializers.CharField()
        shout = serializers.SerializerMethodField()

        def get_shout(self, instance):
            return self.context["suffix"] + instance["name"].upper()

    assert Described.render_plan() is None
    data = Described({"name": "ann"}, context={"suffix": "!"}).data
    assert data == {"name": "ann", "shout": "!ANN"}


@pytest.mark.django_db
def test_fields_a_host_removes_from_an_instance_are_left_out_as_drf_does():
    """DRF's dynamic-fields pattern: a serializer instance whose ``fields`` were changed
    renders those fields, not the class's plan."""
    session = services.create_session(scope="org=a", agent_id="bot")
    popped = api.SessionSerializer(session)
    popped.fields.pop("metadata")
    assert "metadata" not in popped.data
    assert "metadata" in api.SessionSerializer(session).data

    class Narrow(api.SessionSerializer):
        def __init__(self, *args, keep=(), **kwargs):
            super().__init__(*args, **kwargs)
            for name in set(self.fields) - set(keep):
                self.fields.pop(name)

    assert Narrow(session, keep=("id", "agent_id")).data == {
        "id": str(session.pk),
        "agent_id": "bot",
    }


def test_an_absent_attribute_is_left_out_and_a_callable_one_called_as_drf_does():
    class Row(PlannedRepresentationMixin, serializers.Serializer):
        name = serializers.CharField(read_only=True)
        number = serializers.IntegerField(read_only=True)
        flag = serializers.BooleanField(read_only=True)

    instance = SimpleNamespace(name=lambda: "called", flag=1)
    assert Row.render_plan() is not None
    assert Row(instance).data == {"name": "called", "flag": True}


_ZONES = st.sampled_from(
    [datetime.UTC, zoneinfo.ZoneInfo("UTC"), zoneinfo.ZoneInfo("Europe/Paris"), None]
)


@given(
    moment=st.datetimes(
        min_value=datetime.datetime(1, 1, 2), max_value=datetime.datetime(9999, 12, 30)
    ),
    zone=_ZONES,
    current=_ZONES.filter(lambda zone: zone is not None),
)
def test_iso_datetime_is_drfs_datetime_output(moment, zone, current):
    field = serializers.DateTimeField()
    value = moment.replace(tzinfo=zone)
    with timezone.override(current):
        try:
            expected = field.to_representation(value)
        except serializers.ValidationError:  # DRF's own refusal (an overflow)
            with pytest.raises(serializers.ValidationError):
                iso_datetime(value, field)
            return
        assert iso_datetime(value, field) == expected


def test_a_uuid_is_written_as_drf_writes_it():
    class Row(PlannedRepresentationMixin, serializers.Serializer):
        id = serializers.UUIDField(read_only=True)
        hexed = serializers.UUIDField(read_only=True, format="hex")

    value = uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert Row({"id": value, "hexed": value}).data == {
        "id": "12345678-1234-5678-1234-567812345678",
        "hexed": "12345678123456781234567812345678",
    }


def test_a_many_serializer_renders_its_rows_from_the_plan(rows):
    # One settings read and plan look-up per list, not per row (docs/design.md §14.5).
    from cortex_sessions.api.serializers.rendering import PlannedListSerializer

    listed = api.ListedMessageSerializer(rows.messages, many=True)
    assert type(listed) is PlannedListSerializer
    assert type(api.MessagePageSerializer().fields["results"]) is PlannedListSerializer
    assert listed.data == [api.ListedMessageSerializer(m).data for m in rows.messages]


def test_a_subclass_overriding_to_representation_is_called_for_every_listed_row(rows):
    class Shouting(api.ListedMessageSerializer):
        def to_representation(self, instance):
            data = super().to_representation(instance)
            data["role"] = data["role"].upper()
            return data

    class Page(api.MessagePageSerializer):
        results = Shouting(many=True)

    roles = [row["role"] for row in Shouting(rows.messages, many=True).data]
    assert roles == ["USER", "TOOL"]
    page = Page({"results": rows.messages, "has_more": False, "next": None}).data
    assert [row["role"] for row in page["results"]] == ["USER", "TOOL"]


def test_a_choice_outside_the_choices_and_an_enum_are_written_as_drf_writes_them():
    class Row(PlannedRepresentationMixin, serializers.Serializer):
        role = serializers.ChoiceField(choices=[("1", "one"), ("user", "User")], read_only=True)

    for value in ("user", "other", "", "1", 1):
        drf = serializers.ChoiceField(choices=[("1", "one"), ("user", "User")])
        expected = drf.to_representation(value)
        assert Row({"role": value}).data == {"role": expected}
