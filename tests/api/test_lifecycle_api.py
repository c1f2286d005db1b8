"""REST endpoints of the thread lifecycle (docs/design.md §11.1–§11.4)."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from cortex_sessions import services
from cortex_sessions.models import Message, Session
from tests.api.conftest import BASE, session_url

pytestmark = pytest.mark.django_db

MERGE_PATCH = "application/merge-patch+json"


@pytest.fixture
def chat(alice_scope):
    session = services.create_session(
        scope=alice_scope, agent_id="a", title="Trip", metadata={"team": "x", "n": 1}
    )
    services.append_messages(
        scope=alice_scope,
        session_id=session.pk,
        messages=[
            {"role": "user", "content": "q1"},
            {"role": "assistant", "content": "a1"},
            {"role": "user", "content": "q2"},
            {"role": "assistant", "content": "a2"},
        ],
    )
    return session


@pytest.fixture
def foreign(make_user):
    bob = make_user("bob", org="other")
    session = services.create_session(scope=f"org=other/user={bob.pk}", agent_id="a")
    services.append_messages(
        scope=session.scope, session_id=session.pk, messages=[{"role": "user", "content": "x"}]
    )
    return session


def _state():
    return (
        list(Session.objects.order_by("pk").values()),
        list(Message.objects.order_by("pk").values_list("pk", "session", "seq")),
    )


# -- fork -----------------------------------------------------------------------------------------


def test_fork_answers_201_with_the_new_session(api, chat):
    response = api.post(session_url(chat.pk, "fork/"), {"up_to_seq": 2, "title": "B"}, "json")
    assert response.status_code == 201
    body = response.json()
    assert body["forked_from"] == str(chat.pk)
    assert body["forked_at_seq"] == 2
    assert (body["title"], body["metadata"], body["message_count"]) == ("B", chat.metadata, 2)
    assert body["last_message"] == "a1"
    assert body["is_default"] is False
    assert body["archived_at"] is None
    page = api.get(session_url(body["id"], "messages/")).json()["results"]
    assert [(m["seq"], m["content"][0]["text"]) for m in page] == [(1, "q1"), (2, "a1")]


def test_fork_with_an_empty_body_copies_everything(api, chat):
    response = api.post(session_url(chat.pk, "fork/"), {}, "json")
    assert response.status_code == 201
    assert response.json()["message_count"] == 4


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"up_to_seq": 5}, "invalid_up_to_seq"),
        ({"up_to_seq": -1}, "invalid_up_to_seq"),
        ({"up_to_seq": "2"}, "invalid_up_to_seq"),
        ({"up_to_seq": 1.5}, "invalid_up_to_seq"),
        ({"up_to_seq": True}, "invalid_up_to_seq"),
        ({"up_to_seq": None}, "invalid_up_to_seq"),  # not an integer: leave it out for all
        ({"up_to_seq": 1000}, "invalid_up_to_seq"),  # schemathesis: past the last seq
        ({"metadata": [1]}, "invalid_metadata"),
        ({"metadata": None}, "invalid_metadata"),
        ({"metadata": {"a\x00": 1}}, "nul_character"),
        ({"title": None}, "invalid"),
        ({"title": "a\x00"}, "nul_character"),
        ({"metadata": None, "up_to_seq": 1000, "title": None}, "invalid"),  # schemathesis
    ],
)
def test_fork_refuses_bad_input_with_a_code_and_writes_nothing(api, chat, body, code):
    before = _state()
    response = api.post(session_url(chat.pk, "fork/"), body, "json")
    assert response.status_code == 400
    assert response.json()["code"] == code
    assert _state() == before


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("title", None),
        ("title", 5),
        ("title", "x" * 501),
        ("title", "nul\x00"),
        ("metadata", None),
        ("metadata", [1]),
        ("metadata", "x"),
        ("metadata", {"k\x00": 1}),
    ],
)
def test_fork_refuses_a_title_or_metadata_as_create_does(api, chat, field, value):
    """Fork took ``"title": null`` and ``"metadata": null`` (as "the source's") where create
    refuses them: the same field follows the same rule, with the same code (§11.1, §12.4)."""
    before = _state()
    created = api.post(BASE, {"agent_id": "a", field: value}, "json")
    forked = api.post(session_url(chat.pk, "fork/"), {field: value}, "json")
    assert created.status_code == forked.status_code == 400
    assert forked.json()["code"] == created.json()["code"]
    assert forked.json()["errors"] == created.json()["errors"]
    assert _state() == before


def test_fork_without_title_or_metadata_takes_the_sources(api, chat):
    body = api.post(session_url(chat.pk, "fork/"), {"up_to_seq": 0}, "json").json()
    assert (body["title"], body["metadata"]) == (chat.title, chat.metadata)
    empty = api.post(session_url(chat.pk, "fork/"), {"title": "", "metadata": {}}, "json").json()
    assert (empty["title"], empty["metadata"]) == ("", {})


def test_fork_of_a_foreign_id_is_the_same_404_as_a_missing_one(api, foreign, missing_id):
    before = _state()
    answers = [api.post(session_url(sid, "fork/"), {}, "json") for sid in (foreign.pk, missing_id)]
    assert [a.status_code for a in answers] == [404, 404]
    assert answers[0].json() == answers[1].json()
    assert _state() == before


# -- archive --------------------------------------------------------------------------------------


def test_archive_and_unarchive_round_trip(api, chat):
    archived = api.post(session_url(chat.pk, "archive/"))
    assert archived.status_code == 200
    assert archived.json()["archived_at"] is not None
    assert api.get(BASE).json()["count"] == 0
    assert api.get(BASE, {"archived": "true"}).json()["count"] == 1
    assert api.get(BASE, {"archived": "any"}).json()["count"] == 1
    assert api.get(f"{BASE}count/", {"archived": "true"}).json() == {"count": 1}
    assert api.get(f"{BASE}count/").json() == {"count": 0}
    live = api.post(session_url(chat.pk, "unarchive/"))
    assert live.status_code == 200
    assert live.json()["archived_at"] is None
    assert api.get(BASE).json()["count"] == 1


def test_archived_session_answers_409_to_writes_and_changes_nothing(api, chat):
    api.post(session_url(chat.pk, "archive/"))
    before = _state()
    answers = [
        api.post(session_url(chat.pk, "messages/"), {"role": "user", "content": "x"}, "json"),
        api.delete(session_url(chat.pk, "messages/1/")),
        api.delete(session_url(chat.pk, "messages/") + "?after_seq=1"),
        api.post(session_url(chat.pk, "messages/pop/")),
        api.post(session_url(chat.pk, "make-default/")),
    ]
    assert [(a.status_code, a.json()["code"]) for a in answers] == [(409, "session_archived")] * 5
    assert _state() == before
    assert api.get(session_url(chat.pk)).status_code == 200
    assert api.post(session_url(chat.pk, "fork/"), {}, "json").status_code == 201


def test_archived_at_is_read_only_through_patch(api, chat):
    response = api.patch(session_url(chat.pk), {"archived_at": "2020-01-01T00:00:00Z"}, "json")
    assert response.status_code == 200
    assert Session.objects.get(pk=chat.pk).archived_at is None


@pytest.mark.parametrize("value", ["yes", "False", "", "none"])
def test_archived_filter_refuses_other_values(api, chat, value):
    response = api.get(BASE, {"archived": value})
    # An empty value is refused too: read as "not given" it would answer every session.
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_filter"


@pytest.mark.parametrize("action", ["archive/", "unarchive/"])
def test_archive_of_a_foreign_id_is_404(api, foreign, action):
    assert api.post(session_url(foreign.pk, action)).status_code == 404
    assert Session.objects.get(pk=foreign.pk).archived_at is None


# -- metadata -------------------------------------------------------------------------------------


def test_metadata_filter_on_list_and_count(api, chat, alice_scope):
    services.create_session(scope=alice_scope, agent_id="a", metadata={"team": "y"})
    wanted = json.dumps({"team": "x"})
    listed = api.get(BASE, {"metadata": wanted}).json()
    assert [row["id"] for row in listed["results"]] == [str(chat.pk)]
    assert api.get(f"{BASE}count/", {"metadata": wanted}).json() == {"count": 1}
    assert api.get(f"{BASE}count/", {"metadata": "{}"}).json() == {"count": 2}


@pytest.mark.parametrize(
    "value",
    [
        "[1]",
        '"x"',
        "3",
        "not json",
        "NaN",
        json.dumps({str(i): i for i in range(11)}),
        '{"a":"\\ud800"}',  # a lone surrogate escape is malformed JSON here, as in a body
    ],
)
@pytest.mark.parametrize("path", [BASE, f"{BASE}count/"])
def test_metadata_filter_refuses_anything_but_a_small_object(api, chat, path, value):
    response = api.get(f"{path}?metadata={quote(value)}")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_filter"
    assert "metadata" in response.json()["errors"]


@pytest.mark.parametrize(
    "value",
    [
        '{"a":"\\u0000"}',  # escaped in a value
        '{"a\\u0000":1}',  # escaped in a key
        '{"a":{"b":["\\u0000"]}}',  # nested
        '{"a":"\x00"}',  # the character itself in the parameter's text
    ],
)
@pytest.mark.parametrize("path", [BASE, f"{BASE}count/"])
def test_metadata_filter_answers_a_nul_as_every_parameter_does(api, chat, path, value):
    """A NUL in the metadata filter was ``invalid_filter`` where a NUL in any other parameter
    or body string is ``nul_character`` (docs/design.md §12.4)."""
    response = api.get(f"{path}?metadata={quote(value)}")
    assert response.status_code == 400
    assert response.json()["code"] == "nul_character"
    assert [e["code"] for e in response.json()["errors"]["metadata"]] == ["nul_character"]


def test_merge_patch_merges_metadata(api, chat):
    body = json.dumps({"metadata": {"n": None, "new": {"k": 1}}, "title": "T2"})
    response = api.patch(session_url(chat.pk), body, content_type=MERGE_PATCH)
    assert response.status_code == 200
    assert response.json()["metadata"] == {"team": "x", "new": {"k": 1}}
    assert response.json()["title"] == "T2"


@pytest.mark.parametrize(
    "body",
    [
        {"metadata": {"gone\x00": None}},  # schemathesis: a NUL in a key that only deletes
        {"metadata": {"team": {"x\x00": None}}},
        {"title": "a\x00"},
        {"cwd": "/a\x00"},
    ],
)
def test_merge_patch_refuses_a_nul_anywhere_as_every_body_does(api, chat, body):
    before = _state()
    response = api.patch(session_url(chat.pk), json.dumps(body), content_type=MERGE_PATCH)
    assert response.status_code == 400
    assert response.json()["code"] == "nul_character"
    assert _state() == before


def test_plain_json_patch_still_replaces_metadata(api, chat):
    response = api.patch(session_url(chat.pk), {"metadata": {"only": 1}}, "json")
    assert response.json()["metadata"] == {"only": 1}


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ("[1]", "invalid"),
        ('"x"', "invalid"),
        ('{"metadata": [1]}', "invalid_metadata"),
        ('{"metadata": "x"}', "invalid_metadata"),
        ('{"title": 5}', "invalid"),
        ("{bad", "parse_error"),
    ],
)
def test_merge_patch_that_is_not_an_object_is_400_and_writes_nothing(api, chat, body, code):
    before = _state()
    response = api.patch(session_url(chat.pk), body, content_type=MERGE_PATCH)
    assert response.status_code == 400
    assert response.json()["code"] == code
    assert _state() == before


def test_merge_patch_body_on_another_endpoint_is_415(api, chat):
    response = api.post(
        session_url(chat.pk, "messages/"),
        json.dumps({"role": "user", "content": "x"}),
        content_type=MERGE_PATCH,
    )
    assert response.status_code == 415
    assert Session.objects.get(pk=chat.pk).message_count == 4


def test_merge_patch_of_a_foreign_id_is_404(api, foreign):
    response = api.patch(
        session_url(foreign.pk), json.dumps({"metadata": {"a": 1}}), content_type=MERGE_PATCH
    )
    assert response.status_code == 404
    assert Session.objects.get(pk=foreign.pk).metadata == {}


# -- undo -----------------------------------------------------------------------------------------


def test_pop_answers_the_message_and_the_new_counters(api, chat):
    response = api.post(session_url(chat.pk, "messages/pop/"))
    assert response.status_code == 200
    body = response.json()
    assert (body["message"]["seq"], body["message"]["content"][0]["text"]) == (4, "a2")
    assert (body["session"]["message_count"], body["session"]["last_message"]) == (3, "q2")


def test_pop_on_an_empty_session_is_404_message_not_found(api, alice_scope):
    empty = services.create_session(scope=alice_scope, agent_id="a")
    response = api.post(session_url(empty.pk, "messages/pop/"))
    assert (response.status_code, response.json()["code"]) == (404, "message_not_found")


def test_delete_one_message(api, chat):
    response = api.delete(session_url(chat.pk, "messages/4/"))
    assert response.status_code == 200
    assert response.json()["deleted"] == 1
    assert response.json()["session"]["message_count"] == 3
    assert response.json()["session"]["last_message"] == "q2"


@pytest.mark.parametrize("seq", ["9", "0", "abc", "-1", "1.0", str(2**63)])
def test_delete_a_missing_or_malformed_seq_is_404(api, chat, seq):
    before = _state()
    response = api.delete(session_url(chat.pk, f"messages/{seq}/"))
    assert (response.status_code, response.json()["code"]) == (404, "message_not_found")
    assert _state() == before


def test_delete_after_seq_and_all(api, chat):
    response = api.delete(session_url(chat.pk, "messages/") + "?after_seq=2")
    assert response.status_code == 200
    assert response.json()["deleted"] == 2
    assert response.json()["session"]["message_count"] == 2
    everything = api.delete(session_url(chat.pk, "messages/"))
    assert everything.json()["deleted"] == 2
    assert everything.json()["session"]["message_count"] == 0
    appended = api.post(session_url(chat.pk, "messages/"), {"role": "user", "content": "n"}, "json")
    assert appended.json()["messages"][0]["seq"] == 5  # seq never reused


@pytest.mark.parametrize("query", ["?afterseq=2", "?after_seq=x", "?after_seq=-1", "?limit=1"])
def test_delete_after_refuses_unknown_or_bad_parameters_and_deletes_nothing(api, chat, query):
    before = _state()
    response = api.delete(session_url(chat.pk, "messages/") + query)
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_filter"
    assert _state() == before


@pytest.mark.parametrize(
    ("method", "suffix"),
    [("post", "messages/pop/"), ("delete", "messages/1/"), ("delete", "messages/")],
)
def test_undo_on_a_foreign_id_is_404_and_deletes_nothing(api, foreign, method, suffix):
    before = _state()
    response = getattr(api, method)(session_url(foreign.pk, suffix))
    assert (response.status_code, response.json()["code"]) == (404, "session_not_found")
    assert _state() == before


# -- Idempotency-Key (docs/design.md §12.1) -------------------------------------------------------


def test_a_retried_fork_with_the_same_key_forks_once(api, chat):
    url = session_url(chat.pk, "fork/")
    first = api.post(url, {"up_to_seq": 2}, "json", HTTP_IDEMPOTENCY_KEY="fork-1")
    again = api.post(url, {"up_to_seq": 2}, "json", HTTP_IDEMPOTENCY_KEY="fork-1")
    assert (first.status_code, again.status_code) == (201, 201)
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert Session.objects.filter(forked_from=chat.pk).count() == 1
    other = api.post(url, {"up_to_seq": 1}, "json", HTTP_IDEMPOTENCY_KEY="fork-1")
    assert (other.status_code, other.json()["code"]) == (422, "idempotency_key_reused")
    assert Session.objects.filter(forked_from=chat.pk).count() == 1


def test_a_retried_pop_with_the_same_key_removes_one_message(api, chat):
    url = session_url(chat.pk, "messages/pop/")
    first = api.post(url, HTTP_IDEMPOTENCY_KEY="pop-1")
    again = api.post(url, HTTP_IDEMPOTENCY_KEY="pop-1")
    assert again.json() == first.json()
    assert first.json()["message"]["seq"] == 4
    assert Message.objects.filter(session=chat).count() == 3
    assert api.post(url, HTTP_IDEMPOTENCY_KEY="pop-2").json()["message"]["seq"] == 3


def test_keyset_pages_honour_the_archived_and_metadata_filters(api, chat, alice_scope):
    services.create_session(scope=alice_scope, agent_id="a", metadata={"team": "x"})
    api.post(session_url(chat.pk, "archive/"))
    live = api.get(BASE, {"cursor": ""}).json()["results"]
    archived = api.get(BASE, {"cursor": "", "archived": "true"}).json()["results"]
    tagged = api.get(BASE, {"cursor": "", "archived": "any", "metadata": '{"n": 1}'}).json()
    assert str(chat.pk) not in {row["id"] for row in live}
    assert [row["id"] for row in archived] == [str(chat.pk)]
    assert [row["id"] for row in tagged["results"]] == [str(chat.pk)]
    page = services.list_sessions_page(
        scope=alice_scope, filters=services.SessionFilters(archived=True, metadata={"n": 1})
    )
    assert [session.pk for session in page.results] == [chat.pk]
