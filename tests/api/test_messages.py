"""Message endpoints: append one or many, read newest-first pages (docs/design.md §7.3)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from cortex_sessions import services
from cortex_sessions.models import Message
from tests.api.conftest import session_url

pytestmark = pytest.mark.django_db


@pytest.fixture
def session(alice_scope):
    return services.create_session(scope=alice_scope, agent_id="coder")


@pytest.fixture
def filled(session, alice_scope):
    """The session with 7 messages, seq 1..7, texts m1..m7."""
    services.append_messages(
        scope=alice_scope,
        session_id=session.pk,
        messages=[{"role": "user", "content": f"m{n}"} for n in range(1, 8)],
    )
    return session


def seqs(response) -> list[int]:
    return [message["seq"] for message in response.json()["results"]]


def query(url: str) -> dict[str, str]:
    return {key: values[0] for key, values in parse_qs(urlsplit(url).query).items()}


def test_post_one_message_with_string_content_stores_one_text_block(api, session):
    response = api.post(
        session_url(session.pk, "messages/"), {"role": "user", "content": "hello"}, format="json"
    )
    assert response.status_code == 201
    body = response.json()
    assert [m["content"] for m in body["messages"]] == [[{"type": "text", "text": "hello"}]]
    assert body["messages"][0]["seq"] == 1
    assert body["messages"][0]["source"] == "user"
    assert body["session"]["message_count"] == 1
    assert body["session"]["last_message"] == "hello"


def test_post_a_list_of_messages_appends_them_in_order_with_new_counters(api, session):
    payload = [
        {"role": "user", "content": "question"},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "answer"}, {"type": "image", "url": "x"}],
            "metadata": {"model": "m"},
        },
        {"role": "tool", "content": "tool output", "source": "host"},
    ]
    response = api.post(session_url(session.pk, "messages/"), payload, format="json")
    assert response.status_code == 201
    body = response.json()
    assert [m["seq"] for m in body["messages"]] == [1, 2, 3]
    assert body["messages"][1]["content"][1] == {"type": "image", "url": "x"}
    assert body["messages"][1]["metadata"] == {"model": "m"}
    assert body["session"]["message_count"] == 3
    assert body["session"]["last_message"] == "answer"  # tool output is not conversation
    assert Message.objects.filter(session=session).count() == 3


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        ([], "invalid"),
        ("just a string", "invalid"),
        ({"content": "x"}, "invalid"),
        ({"role": "wizard", "content": "x"}, "invalid_role"),
        ({"role": 1, "content": "x"}, "invalid_role"),
        ({"role": "user", "content": "x", "source": "oracle"}, "invalid_source"),
        # Reference snapshots are written by the app only; a client cannot forge one.
        ({"role": "user", "content": "x", "source": "session-reference"}, "invalid_source"),
        ({"role": "assistant", "content": "x", "source": "session-reference"}, "invalid_source"),
        ({"role": "user", "content": "x", "colour": "red"}, "unknown_field"),
        ({"role": "user", "content": ""}, "empty_content"),
        ({"role": "user", "content": "   "}, "empty_content"),
        ({"role": "user", "content": []}, "empty_content"),
        ({"role": "user", "content": 5}, "invalid_content"),
        ({"role": "user", "content": [{"text": "no type"}]}, "invalid_content"),
        ({"role": "user", "content": "nul \x00"}, "nul_character"),
        # A NUL is nul_character in every string, choices included (one code per rule).
        ({"role": "us\x00er", "content": "x"}, "nul_character"),
        ({"role": "user", "content": "x", "source": "\x00"}, "nul_character"),
        ({"role": "user", "content": "x", "metadata": [1]}, "invalid_metadata"),
        ([{"role": "user", "content": "ok"}, {"role": "user", "content": ""}], "empty_content"),
        ([{"role": "user", "content": "ok"}, "not an object"], "invalid"),
    ],
)
def test_bad_messages_are_refused_and_nothing_is_written(api, session, payload, code):
    response = api.post(session_url(session.pk, "messages/"), payload, format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == code
    assert body["errors"]
    assert not Message.objects.exists()
    session.refresh_from_db()
    assert session.message_count == 0


def test_list_errors_name_the_index_of_the_bad_message(api, session):
    payload = [{"role": "user", "content": "ok"}, {"role": "wizard", "content": "x"}]
    response = api.post(session_url(session.pk, "messages/"), payload, format="json")
    assert response.status_code == 400
    assert "1.role" in response.json()["errors"]


@pytest.mark.parametrize("count", [1, 3])
def test_a_message_over_max_message_bytes_is_a_413(api, session, settings, count):
    settings.CORTEX_SESSIONS = {**settings.CORTEX_SESSIONS, "MAX_MESSAGE_BYTES": 100}
    payload = [{"role": "user", "content": "x" * 200}] * count
    response = api.post(session_url(session.pk, "messages/"), payload, format="json")
    assert response.status_code == 413
    assert response.json()["code"] == "message_too_large"
    assert not Message.objects.exists()


def test_get_messages_returns_the_newest_page_in_chronological_order(api, filled):
    response = api.get(session_url(filled.pk, "messages/"), {"limit": 3})
    assert response.status_code == 200
    assert seqs(response) == [5, 6, 7]
    assert response.json()["has_more"] is True
    assert query(response.json()["next"]) == {"limit": "3", "before_seq": "5"}


def test_following_next_walks_back_to_the_first_message(api, filled):
    url, pages = session_url(filled.pk, "messages/") + "?limit=3", []
    while url:
        response = api.get(url)
        pages.append(seqs(response))
        url = response.json()["next"]
    assert pages == [[5, 6, 7], [2, 3, 4], [1]]


def test_default_page_holds_page_size_messages(api, filled, settings):
    settings.CORTEX_SESSIONS = {**settings.CORTEX_SESSIONS, "PAGE_SIZE": 2}
    assert seqs(api.get(session_url(filled.pk, "messages/"))) == [6, 7]


def test_after_seq_reads_forward_and_next_continues_forward(api, filled):
    response = api.get(session_url(filled.pk, "messages/"), {"after_seq": 2, "limit": 2})
    assert seqs(response) == [3, 4]
    assert response.json()["has_more"] is True
    following = api.get(response.json()["next"])
    assert seqs(following) == [5, 6]
    last = api.get(following.json()["next"])
    assert seqs(last) == [7]
    assert last.json() | {"results": None} == {"results": None, "has_more": False, "next": None}


def test_before_seq_reads_backward(api, filled):
    response = api.get(session_url(filled.pk, "messages/"), {"before_seq": 4, "limit": 2})
    assert seqs(response) == [2, 3]
    assert response.json()["has_more"] is True


def test_after_and_before_seq_together_give_the_newest_in_the_range(api, filled):
    response = api.get(session_url(filled.pk, "messages/"), {"after_seq": 1, "before_seq": 7})
    assert seqs(response) == [2, 3, 4, 5, 6]
    assert response.json()["has_more"] is False


def test_empty_session_has_an_empty_page(api, session):
    response = api.get(session_url(session.pk, "messages/"))
    assert response.json() == {"results": [], "has_more": False, "next": None}


@pytest.mark.parametrize(
    "params",
    [
        {"limit": "-1"},
        {"limit": "0"},
        {"limit": "1001"},
        {"limit": "ten"},
        {"after_seq": "-1"},
        {"before_seq": "x"},
        {"after_seq": "99999999999999999999999"},
    ],
)
def test_bad_message_page_parameters_are_a_400(api, session, params):
    response = api.get(session_url(session.pk, "messages/"), params)
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid_filter"
    assert set(body["errors"]) == set(params)
