"""The service API: sessions, list filters, the default session (docs/design.md §6, §7.1–7.2)."""

from __future__ import annotations

import dataclasses
import inspect
import uuid

import pytest

from cortex_sessions import services, signals
from cortex_sessions.exceptions import (
    DefaultConflict,
    InvalidAgentId,
    InvalidFilter,
    InvalidInput,
    InvalidMetadata,
    InvalidScope,
    NoScope,
    NulCharacter,
    SessionNotFound,
    ValueTooLong,
)
from cortex_sessions.models import Message, Session

pytestmark = pytest.mark.django_db

ACME = "org=acme"
ALICE = "org=acme/user=alice"
BOB = "org=acme/user=bob"
OTHER = "org=other/user=eve"


def make(scope=ALICE, agent_id="agent-1", **kwargs):
    return services.create_session(scope=scope, agent_id=agent_id, **kwargs)


# -- create / get / update / delete ---------------------------------------------------------------


def test_create_stores_the_canonical_scope_and_host_fields():
    session = make(title="Plan", metadata={"k": [1, 2]}, cwd="/srv/app")
    stored = Session.objects.get(pk=session.pk)
    assert (stored.scope, stored.agent_id, stored.title) == (ALICE, "agent-1", "Plan")
    assert stored.metadata == {"k": [1, 2]} and stored.cwd == "/srv/app"
    assert (stored.message_count, stored.last_message, stored.backfilled_by) == (0, "", "")
    assert stored.id.version == 7


@pytest.mark.parametrize(
    ("kwargs", "error", "code"),
    [
        ({"scope": None}, NoScope, "no_scope"),
        ({"scope": ""}, NoScope, "no_scope"),
        ({"scope": "org="}, InvalidScope, "invalid_scope"),
        ({"scope": "Org=acme"}, InvalidScope, "invalid_scope"),
        ({"agent_id": ""}, InvalidAgentId, "invalid_agent_id"),
        ({"agent_id": "x" * 256}, InvalidAgentId, "invalid_agent_id"),
        ({"agent_id": "bad\nid"}, InvalidAgentId, "invalid_agent_id"),
        ({"metadata": ["not", "an", "object"]}, InvalidMetadata, "invalid_metadata"),
        ({"metadata": "text"}, InvalidMetadata, "invalid_metadata"),
        ({"metadata": {"n": float("nan")}}, InvalidMetadata, "invalid_metadata"),
        ({"metadata": {"s": {1, 2}}}, InvalidMetadata, "invalid_metadata"),
        ({"metadata": {"k": "a\x00b"}}, NulCharacter, "nul_character"),
        ({"metadata": {"a\x00": 1}}, NulCharacter, "nul_character"),
        ({"title": "x" * 501}, ValueTooLong, "too_long"),
        ({"title": "nul\x00"}, NulCharacter, "nul_character"),
        ({"cwd": "/tmp/\x00"}, NulCharacter, "nul_character"),
    ],
)
def test_bad_session_input_raises_a_coded_error_and_writes_nothing(kwargs, error, code):
    arguments = {"scope": ALICE, "agent_id": "agent-1", **kwargs}
    with pytest.raises(error) as info:
        services.create_session(**arguments)
    assert info.value.code == code
    assert Session.objects.count() == 0


def test_title_of_500_characters_is_accepted():
    assert make(title="x" * 500).title == "x" * 500


def test_get_finds_sessions_at_and_beneath_the_scope_only():
    session = make(scope=ALICE)
    assert services.get_session(scope=ALICE, session_id=session.pk) == session
    assert services.get_session(scope=ACME, session_id=str(session.pk)) == session
    for scope in (BOB, "org=acme2", OTHER):
        with pytest.raises(SessionNotFound):
            services.get_session(scope=scope, session_id=session.pk)


@pytest.mark.parametrize("session_id", ["not-a-uuid", "", None, 42, str(uuid.uuid4())])
def test_get_with_an_unknown_or_malformed_id_is_session_not_found(session_id):
    make()
    with pytest.raises(SessionNotFound) as info:
        services.get_session(scope=ALICE, session_id=session_id)
    assert info.value.code == "session_not_found"


def test_update_writes_only_the_given_host_fields():
    session = make(title="old", metadata={"a": 1}, cwd="/a")
    updated = services.update_session(scope=ALICE, session_id=session.pk, title="new")
    assert (updated.title, updated.metadata, updated.cwd) == ("new", {"a": 1}, "/a")
    assert updated.updated_at > session.updated_at
    updated = services.update_session(scope=ALICE, session_id=session.pk, metadata={}, cwd=None)
    assert (updated.title, updated.metadata, updated.cwd) == ("new", {}, None)


@pytest.mark.parametrize("function", [services.update_session, services.aupdate_session])
def test_update_signature_shows_a_left_out_field_as_unchanged(function):
    """help() and inspect show the default by name, not ``<object object at 0x…>``."""
    parameters = inspect.signature(function).parameters

    shown = [str(parameters[name]) for name in ("title", "metadata", "cwd")]

    assert [text.rsplit(" = ", 1)[1] for text in shown] == ["UNCHANGED"] * 3


def test_update_of_a_session_out_of_scope_is_not_found_and_changes_nothing():
    session = make(scope=ALICE, title="mine")
    with pytest.raises(SessionNotFound):
        services.update_session(scope=BOB, session_id=session.pk, title="stolen")
    assert Session.objects.get(pk=session.pk).title == "mine"


def test_update_with_bad_metadata_changes_nothing():
    session = make(metadata={"keep": True})
    with pytest.raises(InvalidMetadata):
        services.update_session(scope=ALICE, session_id=session.pk, metadata=[1])
    assert Session.objects.get(pk=session.pk).metadata == {"keep": True}


def test_title_update_never_writes_back_stale_counters():
    """An append landing between reading a session and saving its title is not lost (§5)."""
    session = make()
    stale = Session.objects.get(pk=session.pk)  # a client reads the session ...
    services.append_messages(
        scope=ALICE, session_id=session.pk, messages=[{"role": "user", "content": "hi"}]
    )
    stale.title = "renamed"  # ... and saves its edit after an append landed
    stale.save()
    services.update_session(scope=ALICE, session_id=session.pk, title="renamed again")
    stored = Session.objects.get(pk=session.pk)
    assert (stored.title, stored.message_count, stored.last_message) == ("renamed again", 1, "hi")


@pytest.mark.parametrize(
    "field", ["message_count", "last_message", "backfilled_by", "scope", "is_default", "last_seq"]
)
def test_saving_an_app_owned_field_through_the_model_is_refused(field):
    session = make()
    with pytest.raises(ValueError, match=field):
        session.save(update_fields=[field])


def test_plain_save_cannot_rewrite_scope_or_backfilled_by():
    session = make()
    session.scope, session.backfilled_by, session.message_count = OTHER, "forged", 99
    session.save()
    stored = Session.objects.get(pk=session.pk)
    assert (stored.scope, stored.backfilled_by, stored.message_count) == (ALICE, "", 0)


def test_delete_removes_the_session_and_its_messages():
    session = make()
    services.append_messages(
        scope=ALICE, session_id=session.pk, messages=[{"role": "user", "content": "x"}] * 3
    )
    services.delete_session(scope=ALICE, session_id=session.pk)
    assert not Session.objects.exists() and not Message.objects.exists()


def test_delete_out_of_scope_is_not_found_and_deletes_nothing():
    session = make(scope=ALICE)
    with pytest.raises(SessionNotFound):
        services.delete_session(scope=BOB, session_id=session.pk)
    assert Session.objects.filter(pk=session.pk).exists()


# -- list and count -------------------------------------------------------------------------------


def test_list_matches_the_scope_and_everything_beneath_or_exactly_with_exact():
    org = make(scope=ACME, title="org")
    alice = make(scope=ALICE, title="alice")
    make(scope="org=acme2", title="sibling")
    make(scope=OTHER, title="other")
    assert {s.pk for s in services.list_sessions(scope=ACME)} == {org.pk, alice.pk}
    assert [
        s.pk
        for s in services.list_sessions(scope=ACME, filters=services.SessionFilters(exact=True))
    ] == [org.pk]
    assert services.count_sessions(scope=ACME) == 2
    assert services.count_sessions(scope=ACME, filters=services.SessionFilters(exact=True)) == 1


@pytest.mark.parametrize("scope", [None, ""])
def test_list_and_count_without_a_scope_refuse_instead_of_matching_all(scope):
    make()
    with pytest.raises(NoScope):
        services.list_sessions(scope=scope)
    with pytest.raises(NoScope):
        services.count_sessions(scope=scope)


def test_list_filters_by_agent_and_default():
    a1 = make(agent_id="a1")
    make(agent_id="a2")
    default, _ = services.resolve_session(scope=ALICE, agent_id="a1")
    assert {
        s.pk
        for s in services.list_sessions(scope=ALICE, filters=services.SessionFilters(agent_id="a1"))
    } == {a1.pk, default.pk}
    assert [
        s.pk
        for s in services.list_sessions(
            scope=ALICE, filters=services.SessionFilters(default_only=True)
        )
    ] == [default.pk]
    assert services.count_sessions(scope=ALICE, filters=services.SessionFilters(agent_id="a2")) == 1


def test_search_is_a_case_insensitive_title_substring_with_literal_wildcards():
    make(title="100% Done")
    make(title="1000 done")
    make(title="snake_case")
    make(title="snakeXcase")
    make(title="Release PLAN")

    def titles(search):
        return {
            s.title
            for s in services.list_sessions(
                scope=ALICE, filters=services.SessionFilters(search=search)
            )
        }

    assert titles("0%") == {"100% Done"}
    assert titles("e_c") == {"snake_case"}
    assert titles("plan") == {"Release PLAN"}
    assert titles("DONE") == {"100% Done", "1000 done"}
    assert services.count_sessions(scope=ALICE, filters=services.SessionFilters(search="%")) == 1


def test_ordering_is_stable_with_ties_broken_by_id():
    sessions = [make(title="same") for _ in range(5)]
    Session.objects.update(updated_at=sessions[0].updated_at)
    by_id_desc = sorted((s.pk for s in sessions), reverse=True)
    assert [s.pk for s in services.list_sessions(scope=ALICE)] == by_id_desc
    pages = [
        s.pk
        for offset in range(0, 5, 2)
        for s in services.list_sessions(scope=ALICE, ordering="title", limit=2, offset=offset)
    ]
    assert pages == sorted(s.pk for s in sessions)


@pytest.mark.parametrize("ordering", ["title", "-title", "created_at", "message_count"])
def test_ordering_by_each_accepted_field(ordering):
    for title in ("b", "a", "c"):
        make(title=title)
    listed = services.list_sessions(scope=ALICE, ordering=ordering)
    field = ordering.lstrip("-")
    values = [getattr(s, field) for s in listed]
    assert values == sorted(values, reverse=ordering.startswith("-"))


@pytest.mark.parametrize("ordering", ["password", "--title", "scope", "title,id", "-"])
def test_unknown_ordering_is_refused(ordering):
    with pytest.raises(InvalidFilter):
        services.list_sessions(scope=ALICE, ordering=ordering)


def test_limit_and_offset_page_through_the_list():
    for n in range(7):
        make(title=f"t{n}")
    first = services.list_sessions(scope=ALICE, ordering="title", limit=3)
    rest = services.list_sessions(scope=ALICE, ordering="title", limit=10, offset=3)
    assert [s.title for s in first + rest] == [f"t{n}" for n in range(7)]
    with pytest.raises(InvalidFilter):
        services.list_sessions(scope=ALICE, limit=-1)
    with pytest.raises(InvalidFilter):
        services.list_sessions(scope=ALICE, offset=-1)


# -- the default session --------------------------------------------------------------------------


def test_resolve_creates_the_default_on_first_use_and_returns_it_afterwards():
    first, created = services.resolve_session(scope=ALICE, agent_id="agent-1")
    again, created_again = services.resolve_session(scope=ALICE, agent_id="agent-1")
    assert created and not created_again and first == again
    assert first.is_default and first.scope == ALICE and first.backfilled_by == ""


def test_resolve_default_is_per_agent_and_exact_scope():
    a, _ = services.resolve_session(scope=ALICE, agent_id="a")
    b, _ = services.resolve_session(scope=ALICE, agent_id="b")
    org, _ = services.resolve_session(scope=ACME, agent_id="a")
    assert len({a.pk, b.pk, org.pk}) == 3
    assert org.scope == ACME


def test_resolve_with_a_session_id_returns_it_only_within_scope_and_agent():
    session = make(scope=ALICE, agent_id="a")
    assert services.resolve_session(scope=ACME, agent_id="a", session_id=session.pk) == (
        session,
        False,
    )
    for scope, agent in ((BOB, "a"), (ALICE, "b"), (OTHER, "a")):
        with pytest.raises(SessionNotFound):
            services.resolve_session(scope=scope, agent_id=agent, session_id=session.pk)
    with pytest.raises(SessionNotFound):
        services.resolve_session(scope=ALICE, agent_id="a", session_id=uuid.uuid4())


def test_second_default_for_same_agent_and_scope_is_refused():
    make(is_default=True)
    with pytest.raises(DefaultConflict) as info:
        make(is_default=True)
    assert info.value.code == "default_conflict"
    assert Session.objects.filter(is_default=True).count() == 1


def test_make_default_demotes_the_old_default_atomically():
    old, _ = services.resolve_session(scope=ALICE, agent_id="agent-1")
    new = make()
    other_agent, _ = services.resolve_session(scope=ALICE, agent_id="agent-2")
    promoted = services.make_default(scope=ALICE, session_id=new.pk)
    assert promoted.is_default
    assert set(Session.objects.filter(is_default=True).values_list("pk", flat=True)) == {
        new.pk,
        other_agent.pk,
    }
    assert services.resolve_session(scope=ALICE, agent_id="agent-1") == (promoted, False)
    assert not Session.objects.get(pk=old.pk).is_default


def test_make_default_on_the_default_is_a_no_op():
    default, _ = services.resolve_session(scope=ALICE, agent_id="agent-1")
    assert services.make_default(scope=ALICE, session_id=default.pk).is_default
    assert Session.objects.filter(is_default=True).count() == 1


def test_make_default_out_of_scope_is_not_found():
    session = make(scope=ALICE)
    with pytest.raises(SessionNotFound):
        services.make_default(scope=BOB, session_id=session.pk)
    assert not Session.objects.get(pk=session.pk).is_default


def test_deleting_the_default_is_allowed_and_the_next_resolve_creates_a_new_one():
    default, _ = services.resolve_session(scope=ALICE, agent_id="agent-1")
    services.delete_session(scope=ALICE, session_id=default.pk)
    fresh, created = services.resolve_session(scope=ALICE, agent_id="agent-1")
    assert created and fresh.pk != default.pk


# -- signals --------------------------------------------------------------------------------------


def test_signals_are_sent_after_commit(django_capture_on_commit_callbacks):
    seen = []

    def receiver(signal, **kwargs):
        seen.append((signal, kwargs))

    for signal in (signals.session_created, signals.messages_appended, signals.session_deleted):
        signal.connect(receiver, weak=False)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            session = make()
            services.append_messages(
                scope=ALICE, session_id=session.pk, messages=[{"role": "user", "content": "x"}]
            )
            services.delete_session(scope=ALICE, session_id=session.pk)
    finally:
        for signal in (signals.session_created, signals.messages_appended, signals.session_deleted):
            signal.disconnect(receiver)
    sent = [signal for signal, _ in seen]
    assert sent == [signals.session_created, signals.messages_appended, signals.session_deleted]
    assert seen[1][1]["messages"][0].seq == 1
    assert seen[2][1]["session_id"] == session.pk and seen[2][1]["scope"] == ALICE


# -- bad arguments from Python callers ------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"limit": "5"}, "invalid_filter"),
        ({"limit": True}, "invalid_filter"),
        ({"offset": 2**70}, "invalid_filter"),
        ({"offset": 1.5}, "invalid_filter"),
        ({"ordering": ["title"]}, "invalid_filter"),
        ({"search": 5}, "invalid_filter"),
        ({"search": "a\x00"}, "nul_character"),
        ({"agent_id": "a\x00"}, "nul_character"),
        ({"agent_id": "\ud800"}, "invalid_text"),
    ],
)
def test_bad_list_arguments_raise_a_coded_error_on_every_database(kwargs, code):
    make()
    fields = {field.name for field in dataclasses.fields(services.SessionFilters)}
    filters = {name: value for name, value in kwargs.items() if name in fields}
    rest = {name: value for name, value in kwargs.items() if name not in fields}
    with pytest.raises(InvalidInput) as info:
        services.list_sessions(scope=ALICE, filters=services.SessionFilters(**filters), **rest)
    assert info.value.code == code


#: Agent ids no session can have: every way of breaking the rule of ``check_agent_id``.
BAD_AGENT_IDS = ["", " ", "a\tb", "a\nb", "a\x7fb", "\x01", "a\x1fb", "a" * 256, 5, b"agent-1"]

#: Every service that takes ``agent_id`` as a filter, called with one.
AGENT_ID_FILTERS = {
    "list_sessions": lambda agent_id: services.list_sessions(
        scope=ALICE, filters=services.SessionFilters(agent_id=agent_id)
    ),
    "count_sessions": lambda agent_id: services.count_sessions(
        scope=ALICE, filters=services.SessionFilters(agent_id=agent_id)
    ),
    "list_sessions_page": lambda agent_id: services.list_sessions_page(
        scope=ALICE, filters=services.SessionFilters(agent_id=agent_id)
    ),
    "session_queryset": lambda agent_id: list(
        services.session_queryset(scope=ALICE, filters=services.SessionFilters(agent_id=agent_id))
    ),
    "get_session": lambda agent_id: services.get_session(
        scope=ALICE, session_id=uuid.uuid4(), agent_id=agent_id
    ),
}


@pytest.mark.parametrize("agent_id", BAD_AGENT_IDS)
@pytest.mark.parametrize("service", sorted(AGENT_ID_FILTERS))
def test_a_bad_agent_id_filter_is_refused_as_invalid_agent_id_not_answered_empty(service, agent_id):
    """``list_sessions(agent_id="a\tb")`` returned [] where ``?agent_id=a%09b`` is a 400
    ``invalid_agent_id``: a filter naming an agent no session can have is the services'
    agent id rule broken, as in ``create_session`` and ``resolve_session`` (§12.4)."""
    make()
    with pytest.raises(InvalidAgentId) as info:
        AGENT_ID_FILTERS[service](agent_id)
    assert (info.value.code, info.value.field) == ("invalid_agent_id", "agent_id")


@pytest.mark.parametrize(
    ("agent_id", "code"), [("a\x00b", "nul_character"), ("a\ud800", "invalid_text")]
)
@pytest.mark.parametrize(
    "call",
    [
        lambda agent_id: services.list_sessions(
            scope=ALICE, filters=services.SessionFilters(agent_id=agent_id)
        ),
        lambda agent_id: services.create_session(scope=ALICE, agent_id=agent_id),
        lambda agent_id: services.resolve_session(scope=ALICE, agent_id=agent_id),
        lambda agent_id: services.check_agent_id(agent_id),
    ],
    ids=["list", "create", "resolve", "check_agent_id"],
)
def test_nul_or_a_lone_surrogate_in_an_agent_id_has_the_code_it_has_in_every_string(
    call, agent_id, code
):
    """As in the API (a NUL in any body string or text parameter is ``nul_character``), in a
    filter and in a write alike; ``create_session`` answered ``invalid_agent_id`` to a NUL."""
    with pytest.raises(InvalidInput) as info:
        call(agent_id)
    assert info.value.code == code
    assert not Session.objects.exists()


def test_a_good_agent_id_filter_still_lists_that_agents_sessions():
    mine, _ = make(agent_id="planner"), make(agent_id="coder")
    assert [
        s.pk
        for s in services.list_sessions(
            scope=ALICE, filters=services.SessionFilters(agent_id="planner")
        )
    ] == [mine.pk]
    assert (
        services.count_sessions(scope=ALICE, filters=services.SessionFilters(agent_id="planner"))
        == 1
    )
    assert services.get_session(scope=ALICE, session_id=mine.pk, agent_id="planner") == mine


@pytest.mark.parametrize(
    "kwargs",
    [
        {"title": "\udc00"},
        {"cwd": "/x\ud800"},
        {"metadata": {"k": "\ud800"}},
        {"agent_id": "\ud800"},
    ],
)
def test_lone_surrogates_are_refused_before_the_database(kwargs):
    arguments = {"scope": ALICE, "agent_id": "agent-1", **kwargs}
    with pytest.raises(InvalidInput) as info:
        services.create_session(**arguments)
    assert info.value.code in {"invalid_text", "invalid_agent_id"}
    assert not Session.objects.exists()
