"""The session admin (docs/design.md §7.4): list, search, filters, forms, inline messages, actions."""

from __future__ import annotations

import json

import pytest
from django.db import IntegrityError, connection
from django.test.utils import CaptureQueriesContext
from django.utils.html import escape

from cortex_sessions import services
from cortex_sessions.admin import INLINE_MESSAGES, LIST_PREVIEW_CHARS, TITLE_PREVIEW_CHARS
from cortex_sessions.content import preview
from cortex_sessions.models import Message, Session
from tests.admin.helpers import (
    add_url,
    bulk_messages,
    change_url,
    changelist_url,
    delete_url,
    flash_messages,
    page_form_data,
)
from tests.factories import SessionFactory

pytestmark = pytest.mark.django_db

BACKFILL = "0003_backfill_default_sessions"


def listed(response) -> list[Session]:
    return list(response.context["cl"].result_list)


# -- changelist -----------------------------------------------------------------------------------


def test_changelist_shows_title_agent_scope_counters_and_markers(
    admin_client, session_with_messages
):
    session = session_with_messages(agent_id="planner", title="Trip to Lisbon", is_default=True)
    SessionFactory(title="Imported", backfilled_by=BACKFILL, scope="org=acme/user=2")

    response = admin_client.get(changelist_url())

    assert response.status_code == 200
    content = response.content.decode()
    assert "Trip to Lisbon" in content
    assert "planner" in content
    assert "org=acme/user=1" in content
    assert "second question" in content
    row = next(s for s in listed(response) if s.pk == session.pk)
    assert row.message_count == 3
    # the default column renders a boolean icon; a backfilled session carries a badge
    assert content.count('alt="True"') >= 1
    assert '<span class="cortex-badge">backfilled</span> Imported' in content


def test_changelist_cuts_long_last_message(admin_client, session_with_messages):
    session = session_with_messages()
    services.append_messages(
        scope=session.scope,
        session_id=session.pk,
        messages=[{"role": "user", "content": "x" * 500}],
    )

    content = admin_client.get(changelist_url()).content.decode()

    # Shown: LIST_PREVIEW_CHARS characters on one line; the tooltip holds the stored preview.
    stored = "x" * 280 + "…"  # LAST_MESSAGE_PREVIEW_CHARS
    shown = "x" * LIST_PREVIEW_CHARS + "…"
    assert f'title="{stored}">{shown}</span>' in content


def test_changelist_cuts_a_long_title_and_keeps_it_whole_in_the_tooltip(admin_client):
    title = "A long title about the login bug " * 15  # 495 characters
    SessionFactory(title=title)

    content = admin_client.get(changelist_url()).content.decode()

    shown = preview(title, TITLE_PREVIEW_CHARS)
    assert len(shown) == TITLE_PREVIEW_CHARS + 1 and shown.endswith("…")
    assert f'<span class="cortex-line" title="{escape(title)}">{escape(shown)}</span>' in content


def test_an_archived_session_carries_a_badge_in_its_title_line(admin_client):
    session = SessionFactory(title="Old trip")
    services.archive_session(scope=session.scope, session_id=session.pk)

    content = admin_client.get(changelist_url()).content.decode()

    assert '<span class="cortex-badge">archived</span> Old trip' in content


def test_changelist_is_ordered_by_last_update(admin_client, session_with_messages):
    older = session_with_messages(title="older")
    newer = session_with_messages(title="newer")
    services.update_session(scope=older.scope, session_id=older.pk, title="older, touched")

    rows = listed(admin_client.get(changelist_url()))

    assert [s.pk for s in rows] == [older.pk, newer.pk]


def test_untitled_session_is_listed_with_a_placeholder_link(admin_client):
    session = SessionFactory(title="")

    content = admin_client.get(changelist_url()).content.decode()

    assert f'href="{change_url(session)}"' in content
    assert "(untitled)" in content


@pytest.mark.parametrize(
    ("query", "expected"),
    [("backfilled=yes", {"imported"}), ("backfilled=no", {"organic", "default"})],
)
def test_backfilled_filter_separates_backfilled_from_organic_sessions(
    admin_client, query, expected
):
    SessionFactory(title="imported", backfilled_by=BACKFILL)
    SessionFactory(title="organic")
    SessionFactory(title="default", is_default=True, scope="org=acme/user=3")

    rows = listed(admin_client.get(f"{changelist_url()}?{query}"))

    assert {s.title for s in rows} == expected


def test_default_and_agent_filters(admin_client):
    SessionFactory(title="a-default", agent_id="a", is_default=True)
    SessionFactory(title="a-other", agent_id="a")
    SessionFactory(title="b-other", agent_id="b")

    defaults = listed(admin_client.get(f"{changelist_url()}?is_default__exact=1"))
    agent_b = listed(admin_client.get(f"{changelist_url()}?agent_id=b"))

    assert [s.title for s in defaults] == ["a-default"]
    assert [s.title for s in agent_b] == ["b-other"]


def test_date_hierarchy_on_creation(admin_client):
    session = SessionFactory()
    created = session.created_at

    response = admin_client.get(
        f"{changelist_url()}?created_at__year={created.year}&created_at__month={created.month}"
    )

    assert response.status_code == 200
    assert [s.pk for s in listed(response)] == [session.pk]


@pytest.mark.parametrize(("term", "expected"), [("lisbon", "Trip to Lisbon"), ("planner", "plan")])
def test_search_by_title_or_agent_id(admin_client, term, expected):
    SessionFactory(title="Trip to Lisbon", agent_id="writer")
    SessionFactory(title="plan", agent_id="planner")

    rows = listed(admin_client.get(changelist_url(), {"q": term}))

    assert [s.title for s in rows] == [expected]


def test_search_by_session_id_finds_exactly_that_session(admin_client):
    wanted = SessionFactory(title="wanted")
    SessionFactory.create_batch(3)

    rows = listed(admin_client.get(changelist_url(), {"q": f"  {wanted.pk}  "}))

    assert [s.pk for s in rows] == [wanted.pk]


def test_changelist_query_count_does_not_grow_with_sessions(
    admin_client, django_assert_max_num_queries
):
    SessionFactory.create_batch(3, is_default=False)

    def count_queries() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert admin_client.get(changelist_url()).status_code == 200
        return len(queries)

    few = count_queries()
    for index in range(120):
        SessionFactory(agent_id=f"agent-{index % 7}", backfilled_by=BACKFILL if index % 5 else "")

    assert count_queries() == few
    with django_assert_max_num_queries(8):
        response = admin_client.get(changelist_url())
    assert len(listed(response)) == 100


# -- change form ----------------------------------------------------------------------------------


def test_change_page_edits_title_metadata_cwd_and_shows_the_rest_read_only(
    admin_client, session_with_messages
):
    session = session_with_messages(title="Old", metadata={"k": 1}, cwd="/srv/app")
    Session.objects.filter(pk=session.pk).update(backfilled_by=BACKFILL)

    response = admin_client.get(change_url(session))

    assert response.status_code == 200
    form = response.context["adminform"].form
    assert set(form.fields) == {"title", "metadata", "cwd", "expires_at", "legal_hold"}
    content = response.content.decode()
    assert 'name="title" value="Old"' in content
    assert "/srv/app" in content
    for read_only in (str(session.pk), "agent-1", "org=acme/user=1", BACKFILL, "second question"):
        assert read_only in content
    for app_owned in ("message_count", "last_message", "last_seq", "backfilled_by", "scope"):
        assert f'name="{app_owned}"' not in content


def test_editing_a_session_goes_through_update_session(admin_client, session_with_messages):
    session = session_with_messages(title="Old")
    before = Session.objects.get(pk=session.pk)
    data = page_form_data(admin_client.get(change_url(session)))
    data.update(title="New", metadata=json.dumps({"team": "blue"}), cwd="/work")

    response = admin_client.post(change_url(session), data)

    assert response.status_code == 302, response.context["adminform"].form.errors
    after = Session.objects.get(pk=session.pk)
    assert (after.title, after.metadata, after.cwd) == ("New", {"team": "blue"}, "/work")
    assert after.updated_at > before.updated_at
    assert (after.message_count, after.last_message, after.last_seq) == (
        before.message_count,
        before.last_message,
        before.last_seq,
    )


def test_edit_sends_only_changed_fields_to_the_service(
    admin_client, session_with_messages, monkeypatch
):
    session = session_with_messages(title="Old", cwd="/a")
    calls = []
    real = services.update_session

    def spy(**kwargs):
        calls.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(services, "update_session", spy)
    data = page_form_data(admin_client.get(change_url(session)))
    data["title"] = "New"

    admin_client.post(change_url(session), data)

    assert calls == [{"scope": session.scope, "session_id": session.pk, "title": "New"}]


def test_empty_cwd_is_stored_as_none_and_empty_metadata_as_object(
    admin_client, session_with_messages
):
    session = session_with_messages(cwd="/a", metadata={"k": 1})
    data = page_form_data(admin_client.get(change_url(session)))
    data.update(cwd="", metadata="")

    admin_client.post(change_url(session), data)

    session.refresh_from_db()
    assert (session.cwd, session.metadata) == (None, {})


@pytest.mark.parametrize("metadata", ["[1, 2]", '"text"', "42", "{not json"])
def test_metadata_that_is_not_a_json_object_is_a_form_error(
    admin_client, session_with_messages, metadata
):
    session = session_with_messages(metadata={"keep": True})
    data = page_form_data(admin_client.get(change_url(session)))
    data["metadata"] = metadata

    response = admin_client.post(change_url(session), data)

    assert response.status_code == 200
    assert "metadata" in response.context["adminform"].form.errors
    session.refresh_from_db()
    assert session.metadata == {"keep": True}


def test_post_tampering_with_app_owned_fields_changes_nothing(admin_client, session_with_messages):
    session = session_with_messages(title="Old")
    Session.objects.filter(pk=session.pk).update(backfilled_by=BACKFILL)
    before = Session.objects.get(pk=session.pk)
    messages_before = list(Message.objects.filter(session=session).values())
    data = page_form_data(admin_client.get(change_url(session)))
    data.update(
        title="New",
        message_count="999",
        last_message="forged",
        last_seq="999",
        backfilled_by="forged",
        scope="org=evil",
        agent_id="evil",
        is_default="on",
        created_at="2001-01-01 00:00:00",
        id="00000000-0000-0000-0000-000000000000",
        **{
            "messages-0-role": "system",
            "messages-0-content": '[{"type": "text", "text": "forged"}]',
            "messages-0-DELETE": "on",
            "messages-TOTAL_FORMS": "4",
            "messages-3-role": "user",
            "messages-3-content": "forged",
            "messages-3-seq": "99",
        },
    )

    response = admin_client.post(change_url(session), data)

    assert response.status_code == 302
    after = Session.objects.get(pk=session.pk)
    assert after.title == "New"
    for name in (
        "agent_id",
        "scope",
        "is_default",
        "message_count",
        "last_message",
        "last_seq",
        "backfilled_by",
        "created_at",
    ):
        assert getattr(after, name) == getattr(before, name), name
    assert list(Message.objects.filter(session=session).values()) == messages_before
    assert Session.objects.count() == 1


# -- add form -------------------------------------------------------------------------------------


def test_add_form_asks_for_agent_scope_and_default(admin_client):
    response = admin_client.get(add_url())

    assert response.status_code == 200
    assert set(response.context["adminform"].form.fields) == {
        "agent_id",
        "scope",
        "is_default",
        "title",
        "metadata",
        "cwd",
    }
    assert not response.context["inline_admin_formsets"]


def test_adding_a_session_goes_through_create_session(admin_client, monkeypatch):
    calls = []
    real = services.create_session

    def spy(**kwargs):
        calls.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(services, "create_session", spy)

    response = admin_client.post(
        add_url(),
        {
            "agent_id": "planner",
            "scope": "org=acme/project=a%2Fb",
            "title": "Plan",
            "metadata": '{"k": 1}',
            "cwd": "",
            "message_count": "7",
            "last_message": "forged",
            "last_seq": "7",
            "backfilled_by": "forged",
        },
    )

    assert response.status_code == 302
    session = Session.objects.get()
    assert (session.agent_id, session.scope, session.title, session.metadata, session.cwd) == (
        "planner",
        "org=acme/project=a%2Fb",
        "Plan",
        {"k": 1},
        None,
    )
    assert (session.message_count, session.last_message, session.last_seq) == (0, "", 0)
    assert session.backfilled_by == ""
    assert not session.is_default
    assert len(calls) == 1
    assert response.url == changelist_url()


#: Metadata text the JSON rule refuses (docs/design.md §12.4–12.5), each of which used to crash a
#: form page (500) on some database: a lone surrogate echoed into an unencodable page, nesting
#: that exhausts Python's recursion limit, nesting MariaDB's JSON check refuses, NaN and
#: out-of-range numbers no database stores, a NUL PostgreSQL refuses.
BAD_METADATA_TEXT = {
    "lone-surrogate": '{"a": "\\ud800"}',
    "surrogate-key": '{"\\udfff": 1}',
    "nul": '{"a": "\\u0000"}',
    "arrays-5000-deep": "[" * 5000 + "]" * 5000,
    "objects-5000-deep": '{"a":' * 5000 + "1" + "}" * 5000,
    "objects-32-deep": '{"a":' * 32 + "1" + "}" * 32,
    "nan": '{"a": NaN}',
    "infinity": '{"a": -Infinity}',
    "out-of-range": '{"a": 1e999}',
    "repeated-key": '{"a": 1, "a": 2}',
}


@pytest.mark.parametrize("text", BAD_METADATA_TEXT.values(), ids=BAD_METADATA_TEXT.keys())
@pytest.mark.parametrize("page", ["add", "change"])
def test_bad_metadata_text_is_a_form_error_shown_as_typed_never_a_500(
    admin_client, session_with_messages, page, text
):
    session = session_with_messages(metadata={"keep": True})
    if page == "add":
        url = add_url()
        data = {"agent_id": "planner", "scope": "org=acme", "metadata": text}
    else:
        url = change_url(session)
        data = {**page_form_data(admin_client.get(url)), "metadata": text}

    response = admin_client.post(url, data)

    assert response.status_code == 200
    assert "metadata" in response.context["adminform"].form.errors
    assert escape(text) in response.content.decode()  # the box shows what was typed
    assert Session.objects.count() == 1
    session.refresh_from_db()
    assert session.metadata == {"keep": True}


def test_metadata_as_deep_as_every_database_stores_is_saved(admin_client, session_with_messages):
    session = session_with_messages()
    deepest = '{"a":' * 30 + "[1]" + "}" * 30  # 31 levels: MariaDB's JSON_VALID limit
    data = {**page_form_data(admin_client.get(change_url(session))), "metadata": deepest}

    response = admin_client.post(change_url(session), data)

    assert response.status_code == 302
    session.refresh_from_db()
    assert session.metadata == json.loads(deepest)


@pytest.mark.parametrize("text", BAD_METADATA_TEXT.values(), ids=BAD_METADATA_TEXT.keys())
def test_a_message_page_takes_no_json_at_all(admin_client, session_with_messages, text):
    """Messages are read-only in the admin: a posted change is refused, never parsed."""
    message = session_with_messages().messages.first()

    response = admin_client.post(change_url(message), {"content": text, "metadata": text})

    assert response.status_code == 403
    stored = Message.objects.get(pk=message.pk)
    assert (stored.content, stored.metadata) == (message.content, message.metadata)


@pytest.mark.parametrize(
    "scope",
    ["", "   ", "org", "Org=acme", "org=", "org=a/b", "a=1/b=2/c=3/d=4", "org=a\x07"],
    ids=["empty", "blank", "no-value", "upper-key", "empty-value", "raw-slash", "too-deep", "ctl"],
)
def test_add_form_with_bad_scope_is_a_form_error(admin_client, scope):
    response = admin_client.post(
        add_url(), {"agent_id": "planner", "scope": scope, "metadata": "{}"}
    )

    assert response.status_code == 200
    assert "scope" in response.context["adminform"].form.errors
    assert not Session.objects.exists()


@pytest.mark.parametrize("agent_id", ["", "   ", "bad\x01agent", "x" * 256])
def test_add_form_with_bad_agent_id_is_a_form_error(admin_client, agent_id):
    response = admin_client.post(
        add_url(), {"agent_id": agent_id, "scope": "org=acme", "metadata": "{}"}
    )

    assert response.status_code == 200
    assert "agent_id" in response.context["adminform"].form.errors
    assert not Session.objects.exists()


@pytest.mark.parametrize("agent_id", [" planner", "planner ", "\tplanner"])
def test_add_form_keeps_or_refuses_surrounding_space_in_an_agent_id_never_strips_it(
    admin_client, agent_id
):
    """An agent id is an identifier ("bot " and "bot" are two agents): the form applies the
    services' rule to it as typed, never to a stripped copy."""
    response = admin_client.post(
        add_url(), {"agent_id": agent_id, "scope": "org=acme", "metadata": "{}"}
    )

    if response.status_code == 302:
        assert Session.objects.get().agent_id == agent_id
    else:
        errors = response.context["adminform"].form.errors.as_data()["agent_id"]
        assert [error.code for error in errors] == ["invalid_agent_id"]
        assert not Session.objects.exists()


def test_second_default_for_same_agent_and_scope_is_a_form_error(admin_client):
    existing = services.create_session(scope="org=acme", agent_id="planner", is_default=True)

    response = admin_client.post(
        add_url(),
        {"agent_id": "planner", "scope": "org=acme", "is_default": "on", "metadata": "{}"},
    )

    assert response.status_code == 200
    errors = response.context["adminform"].form.non_field_errors()
    assert "Another session is already the default for this agent and scope." in errors
    assert list(Session.objects.values_list("pk", flat=True)) == [existing.pk]


def test_default_for_another_agent_or_scope_is_allowed(admin_client):
    services.create_session(scope="org=acme", agent_id="planner", is_default=True)

    for agent_id, scope in [("writer", "org=acme"), ("planner", "org=acme/user=1")]:
        response = admin_client.post(
            add_url(), {"agent_id": agent_id, "scope": scope, "is_default": "on", "metadata": "{}"}
        )
        assert response.status_code == 302

    assert Session.objects.filter(is_default=True).count() == 3


def test_default_lost_to_a_concurrent_save_is_a_message_not_a_crash(admin_client, monkeypatch):
    """Between form validation and save another default appears: the service refuses it."""
    services.create_session(scope="org=acme", agent_id="planner", is_default=True)
    monkeypatch.setattr(Session, "validate_constraints", lambda self, exclude=None: None)

    try:
        response = admin_client.post(
            add_url(),
            {"agent_id": "planner", "scope": "org=acme", "is_default": "on", "metadata": "{}"},
        )
    except IntegrityError:  # pragma: no cover - the failure this test guards against
        pytest.fail("IntegrityError reached the operator")

    assert response.status_code == 302
    assert response.url == add_url()
    assert flash_messages(response) == [
        "Another session is already the default for this agent and scope."
    ]
    assert Session.objects.count() == 1


# -- inline messages ------------------------------------------------------------------------------


def test_change_page_shows_messages_inline_in_seq_order_read_only(
    admin_client, session_with_messages
):
    session = session_with_messages()

    response = admin_client.get(change_url(session))

    content = response.content.decode()
    inline_html = content[content.index('id="messages-group"') :]
    texts = ["first question", "first answer", "second question"]
    positions = [inline_html.index(text) for text in texts]
    assert positions == sorted(positions)
    (inline,) = response.context["inline_admin_formsets"]
    assert not inline.has_add_permission
    assert not inline.has_change_permission
    assert not inline.has_delete_permission
    assert "messages-0-DELETE" not in content
    assert 'name="messages-0-role"' not in content
    assert "assistant" in content


def test_long_session_page_shows_newest_messages_with_bounded_queries(
    admin_client, django_assert_max_num_queries
):
    session = SessionFactory(title="long")
    bulk_messages(session, 10_000)

    with django_assert_max_num_queries(8):
        response = admin_client.get(change_url(session))

    assert response.status_code == 200
    (inline,) = response.context["inline_admin_formsets"]
    seqs = [form.instance.seq for form in inline.formset.forms]
    assert seqs == list(range(10_000 - INLINE_MESSAGES + 1, 10_001))
    content = response.content.decode()
    assert "msg-10000" in content
    assert f"msg-{10_000 - INLINE_MESSAGES:05d}" not in content
    assert f"newest {INLINE_MESSAGES} of 10000 messages" in content.lower()
    assert f"/admin/cortex_sessions/message/?session={session.pk}" in content


def test_long_session_saves_without_touching_messages(admin_client):
    session = SessionFactory(title="long")
    bulk_messages(session, 200)
    data = page_form_data(admin_client.get(change_url(session)))
    data["title"] = "renamed"

    response = admin_client.post(change_url(session), data)

    assert response.status_code == 302
    session.refresh_from_db()
    assert (session.title, session.message_count) == ("renamed", 200)
    assert Message.objects.filter(session=session).count() == 200


# -- actions --------------------------------------------------------------------------------------


def run_action(client, action: str, sessions, **extra):
    return client.post(
        changelist_url(),
        {"action": action, "_selected_action": [str(s.pk) for s in sessions], **extra},
    )


@pytest.mark.parametrize("action", ["make_default", "recount_messages", "delete_selected"])
def test_an_action_on_a_selection_that_is_not_a_session_id_is_an_error_not_a_crash(
    admin_client, action
):
    session = services.create_session(scope="org=acme", agent_id="planner")
    response = admin_client.post(
        changelist_url(),
        {"action": action, "_selected_action": [str(session.pk), "not-a-uuid"]},
        follow=True,
    )
    assert response.status_code == 200
    assert "The selection holds an invalid session id." in response.content.decode()
    assert Session.objects.filter(pk=session.pk, is_default=False).exists()


@pytest.mark.parametrize("action", ["make_default", "recount_messages", "delete_selected"])
@pytest.mark.parametrize("padding", [" {}", "{} ", "\t{}\n"])
def test_an_action_on_a_padded_session_id_is_an_error_not_a_crash(admin_client, action, padding):
    """Django filters the selection as posted, so a valid id with spaces around it must be
    refused like any other value that is not an id (docs/design.md §12.5)."""
    session = services.create_session(scope="org=acme", agent_id="planner")
    response = admin_client.post(
        changelist_url(),
        {"action": action, "_selected_action": [padding.format(session.pk)]},
        follow=True,
    )
    assert response.status_code == 200
    assert "The selection holds an invalid session id." in response.content.decode()
    assert Session.objects.filter(pk=session.pk, is_default=False).exists()


def test_make_default_action_swaps_the_default(admin_client):
    old = services.create_session(scope="org=acme", agent_id="planner", is_default=True)
    new = services.create_session(scope="org=acme", agent_id="planner", title="New")
    other_agent = services.create_session(scope="org=acme", agent_id="writer", is_default=True)

    response = run_action(admin_client, "make_default", [new])

    assert response.status_code == 302
    assert set(Session.objects.filter(is_default=True).values_list("pk", flat=True)) == {
        new.pk,
        other_agent.pk,
    }
    old.refresh_from_db()
    assert not old.is_default
    assert flash_messages(response) == ["“New” is now the default session of planner at org=acme."]


def test_make_default_action_needs_exactly_one_session(admin_client):
    first = services.create_session(scope="org=acme", agent_id="planner", is_default=True)
    second = services.create_session(scope="org=acme", agent_id="planner")
    third = services.create_session(scope="org=acme", agent_id="planner")

    response = run_action(admin_client, "make_default", [second, third])

    assert flash_messages(response) == ["Select exactly one session to make it the default."]
    assert list(Session.objects.filter(is_default=True).values_list("pk", flat=True)) == [first.pk]


def test_recount_action_repairs_only_selected_sessions_and_reports_drift(
    admin_client, session_with_messages
):
    drifted = session_with_messages(title="drifted")
    correct = session_with_messages(title="correct")
    unselected = session_with_messages(title="unselected")
    Session.objects.filter(pk__in=[drifted.pk, unselected.pk]).update(
        message_count=17, last_message="stale"
    )

    response = run_action(admin_client, "recount_messages", [drifted, correct])

    drifted.refresh_from_db()
    unselected.refresh_from_db()
    correct.refresh_from_db()
    assert (drifted.message_count, drifted.last_message) == (3, "second question")
    assert (correct.message_count, correct.last_message) == (3, "second question")
    assert (unselected.message_count, unselected.last_message) == (17, "stale")
    (message,) = flash_messages(response)
    assert message.startswith("Checked 2 session(s): 1 had wrong counters and was repaired")
    assert f"{drifted.pk}: 17 → 3 messages, last message fixed" in message


def test_recount_action_reports_when_counters_are_right(admin_client, session_with_messages):
    sessions = [session_with_messages(), session_with_messages(scope="org=other")]

    response = run_action(admin_client, "recount_messages", sessions)

    assert flash_messages(response) == ["Checked 2 sessions: all counters were right."]


def test_delete_action_summarizes_and_removes_sessions_with_their_messages(
    admin_client, session_with_messages, django_assert_max_num_queries
):
    doomed = session_with_messages(title="doomed")
    bulk_messages(long := SessionFactory(title="long", scope="org=acme/user=9"), 3000)
    kept = session_with_messages(title="kept")

    with django_assert_max_num_queries(6):
        confirm = run_action(admin_client, "delete_selected", [doomed, long])

    assert confirm.status_code == 200
    content = confirm.content.decode()
    assert "3 messages" in content
    assert "3000 messages" in content
    assert "msg-00001" not in content

    response = run_action(admin_client, "delete_selected", [doomed, long], post="yes")

    assert response.status_code == 302
    assert list(Session.objects.values_list("pk", flat=True)) == [kept.pk]
    assert set(Message.objects.values_list("session_id", flat=True)) == {kept.pk}


def test_delete_view_removes_the_session_through_the_service(
    admin_client, session_with_messages, monkeypatch
):
    session = session_with_messages()
    calls = []
    real = services.delete_session

    def spy(**kwargs):
        calls.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(services, "delete_session", spy)

    confirm = admin_client.get(delete_url(session))
    assert "3 messages" in confirm.content.decode()
    response = admin_client.post(delete_url(session), {"post": "yes"})

    assert response.status_code == 302
    assert calls == [{"scope": session.scope, "session_id": session.pk}]
    assert not Session.objects.exists()
    assert not Message.objects.exists()


def test_deleting_the_default_lets_the_next_resolve_create_one(admin_client):
    default = services.create_session(scope="org=acme", agent_id="planner", is_default=True)

    admin_client.post(delete_url(default), {"post": "yes"})

    session, created = services.resolve_session(scope="org=acme", agent_id="planner")
    assert created and session.pk != default.pk


# -- permissions ----------------------------------------------------------------------------------


def test_view_only_staff_sees_sessions_but_cannot_edit_or_run_actions(staff_client):
    client = staff_client("view_session", "view_message")
    old = services.create_session(scope="org=acme", agent_id="planner", is_default=True)
    new = services.create_session(scope="org=acme", agent_id="planner", title="New")

    changelist = client.get(changelist_url())
    page = client.get(change_url(new))
    action = run_action(client, "make_default", [new])
    edit = client.post(change_url(new), {"title": "hacked", "metadata": "{}"})

    assert changelist.status_code == 200
    assert "make_default" not in changelist.content.decode()
    assert page.status_code == 200
    assert 'name="title"' not in page.content.decode()
    assert action.status_code == 200  # "No action selected", nothing run
    assert edit.status_code == 403
    old.refresh_from_db()
    new.refresh_from_db()
    assert old.is_default and not new.is_default
    assert new.title == "New"


def test_deleting_a_session_with_messages_needs_permission_to_delete_messages(
    staff_client, session_with_messages
):
    client = staff_client("view_session", "delete_session", "view_message")
    session = session_with_messages()

    confirm = client.get(delete_url(session))
    response = client.post(delete_url(session), {"post": "yes"})

    assert confirm.context["perms_lacking"] == {"message"}
    assert response.status_code == 403
    assert Session.objects.filter(pk=session.pk).exists()
    assert Message.objects.filter(session=session).count() == 3
