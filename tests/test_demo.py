"""The example project's demo: Chit-Chat conversations imported and served by the API."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import connection
from rest_framework.test import APIClient

from cortex_sessions import services
from cortex_sessions.content import preview
from cortex_sessions.models import ImportedConversation, Message, Session
from cortex_sessions.transfer import dump_conversation, parse_conversation
from example_project.demo.chitchat import convert, read_conversations

pytest.importorskip("chitchat_dataset", reason="the demo extra is not installed")

MEMBERS = ["bob", "carol", "dave", "frank"]  # conversation i goes to MEMBERS[i % 4]
SESSIONS = "/api/cortex/sessions/"


@pytest.fixture(autouse=True)
def org_resolver(settings):
    settings.CORTEX_SESSIONS = {
        "SCOPE_RESOLVER": "example_project.tenancy.resolver.org_scope_resolver"
    }


def setup_demo(count: int) -> str:
    out = io.StringIO()
    call_command("demo_setup", conversations=str(count), stdout=out, stderr=out)
    return out.getvalue()


def logged_in(username: str) -> APIClient:
    client = APIClient()
    assert client.login(username=username, password="demo")
    return client


def listed(username: str, **params) -> dict:
    response = logged_in(username).get(SESSIONS, {"agent_id": "chitchat", "limit": 100, **params})
    assert response.status_code == 200, response.content
    return response.json()


# -- the converter --------------------------------------------------------------------------------


def utterance(sender: str, text: str, second: int = 0) -> dict:
    return {"sender": sender, "text": text, "timestamp": f"2018-05-02T19:38:{second:02d}Z"}


def test_first_speaker_is_the_user_and_consecutive_utterances_form_one_message():
    record = {
        "start": "2018-05-02T19:38:00Z",
        "prompt": "Favourite food?",
        "ratings": {"witty": 3},
        "messages": [
            [
                utterance("s1", "Hello there", 1),
                utterance("s1", "  ", 2),
                utterance("s1", "Hi?", 3),
            ],
            [utterance("s2", "hey", 4)],
            [utterance("s2", "pizza", 5)],  # same speaker again: the same message
            [utterance("s1", "nice", 6)],
        ],
    }

    converted = convert("conv-1", record)

    assert converted == {
        "id": "conv-1",
        "title": "Hello there",
        "metadata": {
            "corpus": "chitchat",
            "prompt": "Favourite food?",
            "start": "2018-05-02T19:38:00Z",
            "ratings": {"witty": 3},
        },
        "messages": [
            {"role": "user", "content": "Hello there\nHi?", "created_at": "2018-05-02T19:38:01Z"},
            {"role": "assistant", "content": "hey\npizza", "created_at": "2018-05-02T19:38:04Z"},
            {"role": "user", "content": "nice", "created_at": "2018-05-02T19:38:06Z"},
        ],
    }


def test_a_long_first_line_is_cut_to_a_title_of_500_characters():
    converted = convert("c", {"messages": [[utterance("s1", "x" * 700)]]})
    assert len(converted["title"]) == 500 and converted["title"].endswith("…")


def test_a_conversation_without_text_is_passed_over():
    assert convert("c", {"messages": [[utterance("s1", " ")], []]}) is None


def test_every_corpus_conversation_converts_to_a_valid_import_line():
    conversations = list(read_conversations())

    assert len(conversations) == 7168
    assert len({c["id"] for c in conversations}) == 7168
    for conversation in conversations:
        parsed = parse_conversation(dump_conversation(conversation))
        assert 0 < len(parsed.title) <= 500
        assert parsed.messages[0].role == "user"


# -- demo_setup -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_demo_setup_imports_conversations_that_each_member_reads_through_the_api():
    expected = list(read_conversations(12))

    output = setup_demo(12)

    assert "The demo is ready." in output
    assert "http://127.0.0.1:8000/api/docs/" in output
    for index, username in enumerate(MEMBERS):
        mine = expected[index::4]
        page = listed(username, ordering="created_at")
        assert page["count"] == 3
        assert [s["title"] for s in page["results"]] == [c["title"] for c in mine]
        assert [s["message_count"] for s in page["results"]] == [len(c["messages"]) for c in mine]
        assert {s["scope"] for s in page["results"]} == {
            f"org={'acme' if username in ('bob', 'dave') else 'globex'}"
            f"/user={get_user_model().objects.get(username=username).pk}"
        }
        assert [s["is_default"] for s in page["results"]] == [True, False, False]
    # Org admins see their org's members' sessions, and only those.
    assert listed("alice")["count"] == listed("erin")["count"] == 6
    assert listed("bob", search=expected[0]["title"])["count"] >= 1


@pytest.mark.django_db
def test_imported_messages_keep_roles_text_and_time_of_the_corpus():
    first = next(read_conversations(1))
    setup_demo(1)
    session = listed("bob")["results"][0]

    response = logged_in("bob").get(f"{SESSIONS}{session['id']}/messages/", {"limit": 1000})

    assert response.status_code == 200
    messages = response.json()["results"]
    assert [(m["role"], m["content"][0]["text"]) for m in messages] == [
        (m["role"], m["content"]) for m in first["messages"]
    ]
    assert messages[0]["created_at"].startswith(first["messages"][0]["created_at"][:19])
    assert session["last_message"] == preview(first["messages"][-1]["content"], 280)


@pytest.mark.django_db
def test_running_demo_setup_twice_adds_nothing():
    setup_demo(8)
    counts = (
        get_user_model().objects.count(),
        Session.objects.count(),
        Message.objects.count(),
        ImportedConversation.objects.count(),
    )

    output = setup_demo(8)

    assert counts[1] == 8
    assert (
        get_user_model().objects.count(),
        Session.objects.count(),
        Message.objects.count(),
        ImportedConversation.objects.count(),
    ) == counts
    assert output.count("0 imported (0 messages), 2 skipped as already imported, 0 failed") == 4
    assert Session.objects.filter(is_default=True).count() == 4


@pytest.mark.django_db
def test_a_larger_count_later_imports_only_the_new_conversations():
    setup_demo(4)
    setup_demo(10)
    ids = [c["id"] for c in read_conversations(10)]
    assert sorted(ImportedConversation.objects.values_list("external_id", flat=True)) == sorted(ids)
    assert listed("bob")["count"] == 3 and listed("frank")["count"] == 2


@pytest.mark.django_db
def test_demo_log_ins_work_for_admin_and_members(client):
    setup_demo(1)
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_superuser and admin.check_password("demo")
    assert client.login(username="admin", password="demo")
    assert client.get("/admin/cortex_sessions/session/").status_code == 200
    for username in ["alice", "bob", "carol", "dave", "erin", "frank"]:
        assert logged_in(username).get(SESSIONS).status_code == 200


DEMO_NAMES = ["alice", "bob", "carol", "dave", "erin", "frank"]


def banner_counts(output: str) -> dict[str, int]:
    """``{username: sessions}`` from the log-in lines of demo_setup's banner."""
    counts = {}
    for line in output.splitlines():
        words = line.split()
        if len(words) > 2 and words[-1] == "sessions" and words[0] in DEMO_NAMES:
            counts[words[0]] = int(words[-2].replace(",", ""))
    return counts


@pytest.mark.django_db
def test_the_banner_counts_only_imported_conversations():
    setup_demo(8)
    bob = get_user_model().objects.get(username="bob")
    # A session bob made himself (say, following the API tour) with the demo's own agent id.
    services.create_session(scope=f"org=acme/user={bob.pk}", agent_id="chitchat", title="mine")

    counts = banner_counts(setup_demo(8))

    assert counts == {"alice": 4, "bob": 2, "carol": 2, "dave": 2, "erin": 4, "frank": 2}


@pytest.mark.django_db
def test_the_banner_names_the_api_log_in_for_members(settings):
    settings.ROOT_URLCONF = "example_project.urls"
    output = setup_demo(1)

    assert "http://127.0.0.1:8000/api/auth/login/?next=/api/docs/" in output
    assert "/admin/" in output


@pytest.mark.django_db
def test_members_log_in_through_the_api_log_in_and_use_the_api(settings, client):
    """A member is not staff, so /admin/ refuses them; DRF's log-in page gives the cookie."""
    settings.ROOT_URLCONF = "example_project.urls"
    setup_demo(4)
    assert client.get("/api/auth/login/").status_code == 200

    response = client.post(
        "/api/auth/login/?next=/api/docs/", {"username": "bob", "password": "demo"}
    )

    assert response.status_code == 302
    assert response["Location"] == "/api/docs/"
    listing = client.get(SESSIONS)
    assert listing.status_code == 200
    assert listing.json()["count"] == 1
    assert client.get("/admin/").status_code == 302  # not staff: the admin sends bob to log in


@pytest.mark.parametrize("value", ["0", "-3", "many"])
def test_a_bad_conversation_count_is_a_command_error(value):
    with pytest.raises(CommandError, match="--conversations"):
        call_command("demo_setup", conversations=value)


@pytest.mark.django_db
def test_the_readme_tour_search_finds_what_was_said(settings):
    """README's tour: ``curl -u bob:demo "$B/sessions/?q=my%20dog&limit=1"`` on the demo data
    (SQLite, the demo's database: a substring, newest first; PostgreSQL: the words, ranked)."""
    if connection.vendor == "mysql":
        pytest.skip("MySQL/MariaDB refuse q (tests/test_search_databases.py)")
    settings.ROOT_URLCONF = "example_project.urls"
    setup_demo(300)

    body = logged_in("bob").get(SESSIONS, {"q": "my dog", "limit": 1}).json()

    expected = "The day I got <mark>my dog</mark> was pretty exciting"
    if connection.vendor == "sqlite":
        assert body["count"] == 2
        assert body["results"][0]["match"] == {"snippet": expected, "seq": 10, "rank": None}
    else:
        everything = logged_in("bob").get(SESSIONS, {"q": "my dog", "limit": 100}).json()
        snippets = [r["match"]["snippet"] for r in everything["results"]]
        assert any("got <mark>my</mark> <mark>dog</mark>" in s for s in snippets), snippets
