"""The session-reference endpoints (docs/design.md §8.8): candidates, prepare, and appending a message
with ``resolve_references`` — successes, every error code with its status, tenancy, durability
and atomicity, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from cortex_sessions import services
from cortex_sessions.api.views import SessionViewSet
from cortex_sessions.models import Message, Session
from cortex_sessions.references import CLOSE_TAG, OPEN_TAG, format_mention, parse_references
from tests.api.conftest import session_url

pytestmark = pytest.mark.django_db

T0 = datetime(2025, 1, 1, tzinfo=UTC)

CANDIDATES = "reference-candidates/"
PREPARE = "references/prepare/"
MESSAGES = "messages/"


# -- helpers and fixtures -------------------------------------------------------------------------


def make_session(scope, *, title="", cwd=None, minutes=None, texts=()):
    """A session at ``scope`` with user/assistant messages alternating over ``texts``."""
    session = services.create_session(scope=scope, agent_id="coder", title=title, cwd=cwd)
    if minutes is not None:
        Session.objects.filter(pk=session.pk).update(created_at=T0 + timedelta(minutes=minutes))
    if texts:
        services.append_messages(
            scope=scope,
            session_id=session.pk,
            messages=[
                {"role": "user" if index % 2 == 0 else "assistant", "content": text}
                for index, text in enumerate(texts)
            ],
        )
    return session


def snapshots(context: dict) -> list[dict]:
    """The snapshots inside a context's prompt, parsed back from JSON."""
    text = context["content"][0]["text"]
    body = text[text.index(OPEN_TAG) + len(OPEN_TAG) : text.index(CLOSE_TAG)]
    return json.loads(body)


def state() -> tuple[list, list]:
    """Every message row and every session's counters, to prove nothing was written."""
    messages = list(Message.objects.order_by("pk").values_list("pk", "session_id", "seq"))
    sessions = list(
        Session.objects.order_by("pk").values_list("pk", "message_count", "last_message")
    )
    return messages, sessions


@pytest.fixture
def current(alice_scope):
    """Alice's session the message is written in (cwd /src/app)."""
    return make_session(alice_scope, title="Current work", cwd="/src/app", texts=["hi"])


@pytest.fixture
def other(alice_scope):
    """Another of alice's sessions, with a short conversation."""
    return make_session(
        alice_scope,
        title="Login bug",
        cwd="/src/app",
        texts=["Why does login fail?", "The session cookie is not secure."],
    )


@pytest.fixture
def bob_session(make_user):
    """A session of bob, alice's colleague in acme: outside alice's scope."""
    bob = make_user("bob", org="acme")
    return make_session(f"org=acme/user={bob.pk}", title="Bob's secret", texts=["secret"])


@pytest.fixture
def carol_session(make_user):
    """A session of carol in another tenant (globex)."""
    carol = make_user("carol", org="globex")
    return make_session(f"org=globex/user={carol.pk}", title="Globex plan", texts=["plan"])


# -- GET reference-candidates ---------------------------------------------------------------------


def test_candidates_are_ranked_and_shaped_with_a_ready_made_mention(api, alice_scope):
    current = make_session(alice_scope, title="Current", cwd="/repo", minutes=50)
    same_old = make_session(alice_scope, title="Same old", cwd="/repo", minutes=1)
    same_new = make_session(alice_scope, title="Same new", cwd="/repo", minutes=2)
    no_cwd = make_session(alice_scope, title="", cwd=None, minutes=40)
    elsewhere = make_session(alice_scope, title="Elsewhere", cwd="/other", minutes=45)

    response = api.get(session_url(current.pk, CANDIDATES))

    assert response.status_code == 200
    body = response.json()
    assert list(body) == ["results"]
    ids = [c["session_id"] for c in body["results"]]
    assert ids == [str(s.pk) for s in (same_new, same_old, no_cwd, elsewhere)]
    first = body["results"][0]
    assert first == {
        "session_id": str(same_new.pk),
        "label": "Same new",
        "cwd": "/repo",
        "created_at": int((T0 + timedelta(minutes=2)).timestamp() * 1000),
        "same_workspace": True,
        "mention": format_mention("Same new", str(same_new.pk)),
    }
    untitled = body["results"][2]
    assert untitled["label"] == str(no_cwd.pk)
    assert untitled["same_workspace"] is False
    assert parse_references(untitled["mention"]).references[0].session_id == str(no_cwd.pk)


def test_candidates_match_id_cwd_or_title_but_never_message_text(api, alice_scope, current):
    by_title = make_session(alice_scope, title="Kubernetes rollout")
    by_cwd = make_session(alice_scope, cwd="/srv/kubernetes")
    by_text = make_session(alice_scope, title="Unrelated", texts=["kubernetes everywhere"])
    by_id = make_session(alice_scope, title="By id")

    def found(q: str) -> set[str]:
        response = api.get(session_url(current.pk, CANDIDATES), {"q": q})
        assert response.status_code == 200
        return {c["session_id"] for c in response.json()["results"]}

    assert found("KUBERNETES") == {str(by_title.pk), str(by_cwd.pk)}
    assert str(by_text.pk) not in found("everywhere")
    assert found(str(by_id.pk)[-12:]) == {str(by_id.pk)}
    assert str(current.pk) not in found("")


def test_candidates_never_include_another_tenants_sessions(
    api, current, other, bob_session, carol_session
):
    response = api.get(session_url(current.pk, CANDIDATES))
    assert [c["session_id"] for c in response.json()["results"]] == [str(other.pk)]
    for q in ("secret", "Globex"):
        assert api.get(session_url(current.pk, CANDIDATES), {"q": q}).json() == {"results": []}


def test_candidate_limit_cuts_the_list_and_is_capped_by_candidate_limit(
    api, alice_scope, current, settings
):
    for minutes in range(5):
        make_session(alice_scope, title=f"s{minutes}", minutes=minutes)
    url = session_url(current.pk, CANDIDATES)
    assert len(api.get(url, {"limit": 2}).json()["results"]) == 2
    settings.CORTEX_SESSIONS = {**settings.CORTEX_SESSIONS, "CANDIDATE_LIMIT": 3}
    assert len(api.get(url).json()["results"]) == 3
    assert len(api.get(url, {"limit": 1000}).json()["results"]) == 3


@pytest.mark.parametrize(
    "params",
    [
        {"limit": "0"},
        {"limit": "-1"},
        {"limit": "ten"},
        {"limit": "1.5"},
        {"limit": "9" * 25},
    ],
)
def test_bad_candidate_parameters_are_400_invalid_filter(api, current, params):
    response = api.get(session_url(current.pk, CANDIDATES), params)
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid_filter"
    assert set(body["errors"]) == set(params)


@pytest.mark.parametrize(("q", "code"), [("nul\x00", "nul_character"), ("x" * 501, "too_long")])
def test_a_bad_candidate_query_answers_the_text_rules_code(api, current, q, code):
    response = api.get(session_url(current.pk, CANDIDATES), {"q": q})
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == code
    assert [item["code"] for item in body["errors"]["q"]] == [code]


@pytest.mark.parametrize("limit", ["0", "9" * 25])
def test_a_bad_candidate_limit_names_the_real_maximum(api, current, settings, limit):
    settings.CORTEX_SESSIONS = {**settings.CORTEX_SESSIONS, "CANDIDATE_LIMIT": 7}

    response = api.get(session_url(current.pk, CANDIDATES), {"limit": limit})

    assert response.status_code == 400
    assert response.json()["errors"]["limit"] == [
        {
            "code": "invalid",
            "detail": "limit must be an integer of at least 1; at most CANDIDATE_LIMIT (7) "
            "candidates are returned, and a larger limit is lowered to it.",
        }
    ]


def test_candidates_of_a_missing_foreign_or_malformed_session_are_the_same_404(
    api, bob_session, carol_session, missing_id
):
    bodies = []
    for session_id in (missing_id, bob_session.pk, carol_session.pk, "not-a-uuid"):
        response = api.get(session_url(session_id, CANDIDATES))
        assert response.status_code == 404
        bodies.append(response.json())
    assert bodies[0]["code"] == "session_not_found"
    assert all(body == bodies[0] for body in bodies)


def test_an_invalid_candidate_limit_setting_is_a_500_with_its_code(api, current, settings):
    settings.CORTEX_SESSIONS = {**settings.CORTEX_SESSIONS, "CANDIDATE_LIMIT": 0}
    response = api.get(session_url(current.pk, CANDIDATES))
    assert response.status_code == 500
    assert response.json()["code"] == "SESSION_REFERENCE_INVALID_CONFIG"


@pytest.mark.parametrize("count", [5, 40])
def test_candidate_queries_do_not_grow_with_the_number_of_candidates(
    api, alice_scope, current, count, django_assert_max_num_queries
):
    for minutes in range(count):
        make_session(alice_scope, title=f"s{minutes}", cwd=f"/p{minutes % 3}", texts=["x"])
    # The resolver's membership lookup, the current session, the candidates.
    with django_assert_max_num_queries(3):
        response = api.get(session_url(current.pk, CANDIDATES), {"q": "s"})
    assert len(response.json()["results"]) == count


# -- POST references/prepare ----------------------------------------------------------------------


def test_prepare_returns_readable_content_and_one_context_and_stores_nothing(
    api, current, other, alice_scope
):
    third = make_session(alice_scope, title="Deploy", texts=["ship it"])
    before = state()
    mention = format_mention("the login bug", str(other.pk))

    response = api.post(
        session_url(current.pk, PREPARE),
        {"content": f"Compare {mention} with this.", "references": [{"session_id": str(third.pk)}]},
        format="json",
    )

    assert response.status_code == 200
    body = response.json()
    assert body["content"] == [{"type": "text", "text": "Compare @the login bug with this."}]
    [context] = body["contexts"]
    assert context["role"] == "user"
    source = context["source"]
    assert {k: source[k] for k in ("kind", "form", "version")} == {
        "kind": "session-reference",
        "form": "recall",
        "version": 1,
    }
    assert [(r["session_id"], r["label"], r["input_index"]) for r in source["references"]] == [
        (str(third.pk), str(third.pk), 0),
        (str(other.pk), "the login bug", 1),
    ]
    assert source["references"][1]["captured_through_seq"] == 2
    assert source["references"][1]["truncated"] is False
    [_, login] = snapshots(context)
    assert login["conversation"] == [
        {"role": "user", "text": "Why does login fail?"},
        {"role": "assistant", "text": "The session cookie is not secure."},
    ]
    assert state() == before


def test_prepare_parses_mentions_in_text_blocks_and_keeps_other_blocks(api, current, other):
    blocks = [
        {"type": "text", "text": "See " + format_mention("", str(other.pk))},
        {"type": "image", "url": "https://example.com/x.png"},
    ]
    response = api.post(session_url(current.pk, PREPARE), {"content": blocks}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert body["content"] == [
        {"type": "text", "text": f"See @{other.pk}"},
        {"type": "image", "url": "https://example.com/x.png"},
    ]
    assert [r["session_id"] for r in body["contexts"][0]["source"]["references"]] == [str(other.pk)]


def test_prepare_without_references_has_no_context(api, current):
    response = api.post(session_url(current.pk, PREPARE), {"content": "plain"}, format="json")
    assert response.status_code == 200
    assert response.json() == {"content": [{"type": "text", "text": "plain"}], "contexts": []}


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        ({"references": []}, "invalid"),
        ([{"content": "x"}], "invalid"),
        ({"content": ""}, "empty_content"),
        ({"content": 5}, "invalid_content"),
        ({"content": "x", "references": 5}, "SESSION_REFERENCE_INVALID_REFERENCE"),
        ({"content": "x", "references": True}, "SESSION_REFERENCE_INVALID_REFERENCE"),
        (
            {"content": "x", "references": {"session_id": "x"}},
            "SESSION_REFERENCE_INVALID_REFERENCE",
        ),
    ],
)
def test_prepare_refuses_a_malformed_body(api, current, payload, code):
    response = api.post(session_url(current.pk, PREPARE), payload, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == code


def test_prepare_in_a_missing_or_foreign_session_is_the_usual_404(
    api, bob_session, carol_session, missing_id
):
    bodies = [
        api.post(session_url(sid, PREPARE), {"content": "x"}, format="json")
        for sid in (missing_id, bob_session.pk, carol_session.pk)
    ]
    assert {r.status_code for r in bodies} == {404}
    assert bodies[0].json()["code"] == "session_not_found"
    assert all(r.json() == bodies[0].json() for r in bodies)


# -- reference errors, on both endpoints ----------------------------------------------------------


def _body(endpoint: str, content: str, references: list) -> dict:
    body: dict = {"content": content, "references": references}
    if endpoint == MESSAGES:
        body.update(role="user", resolve_references=True)
    return body


ERROR_CASES = {
    "malformed mention": (
        lambda s: ("see @[x](cortex-session:not+canonical)", []),
        400,
        "SESSION_REFERENCE_INVALID_REFERENCE",
    ),
    "non-canonical uri": (
        lambda s: ("see @[x](cortex-session:Im9ubHki==)", []),
        400,
        "SESSION_REFERENCE_INVALID_REFERENCE",
    ),
    "reference not an object": (
        lambda s: ("x", [42]),
        400,
        "SESSION_REFERENCE_INVALID_REFERENCE",
    ),
    "reference with an unknown key": (
        lambda s: ("x", [{"session_id": str(s["other"].pk), "title": "t"}]),
        400,
        "SESSION_REFERENCE_INVALID_REFERENCE",
    ),
    "label with a NUL": (
        lambda s: ("x", [{"session_id": str(s["other"].pk), "label": "a\x00b"}]),
        400,
        "SESSION_REFERENCE_INVALID_REFERENCE",
    ),
    "empty session id": (
        lambda s: ("x", [{"session_id": ""}]),
        400,
        "SESSION_REFERENCE_INVALID_REFERENCE",
    ),
    "self reference by mention": (
        lambda s: (format_mention("me", str(s["current"].pk)), []),
        400,
        "SESSION_REFERENCE_SELF_REFERENCE",
    ),
    "self reference by id": (
        lambda s: ("x", [{"session_id": str(s["current"].pk).upper()}]),
        400,
        "SESSION_REFERENCE_SELF_REFERENCE",
    ),
    "too many": (
        lambda s: ("x", [{"session_id": str(uuid.uuid4())} for _ in range(4)]),
        400,
        "SESSION_REFERENCE_TOO_MANY",
    ),
    "missing session": (
        lambda s: ("x", [{"session_id": str(uuid.uuid4())}]),
        404,
        "SESSION_REFERENCE_READ_FAILED",
    ),
    "not a uuid": (
        lambda s: ("x", [{"session_id": "no-such-session"}]),
        400,
        "SESSION_REFERENCE_INVALID_REFERENCE",
    ),
    "a nul in the session id": (
        lambda s: ("x", [{"session_id": f"{s['other'].pk}\x00"}]),
        400,
        "SESSION_REFERENCE_INVALID_REFERENCE",
    ),
    "a mention of an id that is not a uuid": (
        lambda s: (format_mention("m", "no-such-session"), []),
        400,
        "SESSION_REFERENCE_INVALID_REFERENCE",
    ),
    "another tenant's session": (
        lambda s: ("x", [{"session_id": str(s["carol"].pk)}]),
        404,
        "SESSION_REFERENCE_READ_FAILED",
    ),
    "a colleague's session": (
        lambda s: (format_mention("b", str(s["bob"].pk)), []),
        404,
        "SESSION_REFERENCE_READ_FAILED",
    ),
}


@pytest.fixture
def world(current, other, bob_session, carol_session):
    return {"current": current, "other": other, "bob": bob_session, "carol": carol_session}


@pytest.mark.parametrize("endpoint", [PREPARE, MESSAGES])
@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_each_reference_error_has_its_status_and_code_and_writes_nothing(
    api, world, endpoint, case
):
    build, status, code = ERROR_CASES[case]
    content, references = build(world)
    before = state()
    response = api.post(
        session_url(world["current"].pk, endpoint),
        _body(endpoint, content, references),
        format="json",
    )
    assert response.status_code == status, response.json()
    assert response.json()["code"] == code
    assert state() == before


@pytest.mark.parametrize("endpoint", [PREPARE, MESSAGES])
def test_a_foreign_referenced_session_is_indistinguishable_from_a_missing_one(api, world, endpoint):
    url = session_url(world["current"].pk, endpoint)
    bodies = [
        api.post(url, _body(endpoint, "x", [{"session_id": sid}]), format="json")
        for sid in (str(uuid.uuid4()), str(world["carol"].pk), str(world["bob"].pk))
    ]
    assert {r.status_code for r in bodies} == {404}
    assert bodies[0].json() == {
        "code": "SESSION_REFERENCE_READ_FAILED",
        "detail": "A referenced session could not be read.",
    }
    assert all(r.json() == bodies[0].json() for r in bodies)


@pytest.mark.parametrize("endpoint", [PREPARE, MESSAGES])
def test_a_snapshot_over_the_byte_budget_is_413(api, world, endpoint, settings):
    settings.CORTEX_SESSIONS = {**settings.CORTEX_SESSIONS, "MAX_REFERENCE_BYTES": 40}
    before = state()
    response = api.post(
        session_url(world["current"].pk, endpoint),
        _body(endpoint, "x", [{"session_id": str(world["other"].pk)}]),
        format="json",
    )
    assert response.status_code == 413
    assert response.json()["code"] == "SESSION_REFERENCE_BUDGET_EXCEEDED"
    assert state() == before


@pytest.mark.parametrize("endpoint", [PREPARE, MESSAGES])
def test_a_preparation_past_the_views_deadline_is_503(api, world, endpoint, monkeypatch):
    monkeypatch.setattr(SessionViewSet, "reference_timeout", 0)
    before = state()
    response = api.post(
        session_url(world["current"].pk, endpoint),
        _body(endpoint, "x", [{"session_id": str(world["other"].pk)}]),
        format="json",
    )
    assert response.status_code == 503
    assert response.json()["code"] == "SESSION_REFERENCE_CANCELLED"
    assert state() == before


@pytest.mark.parametrize("endpoint", [PREPARE, MESSAGES])
@pytest.mark.parametrize(
    "setting", [{"MAX_REFERENCES": 4}, {"MAX_REFERENCES": 0}, {"MAX_REFERENCE_BYTES": 0}]
)
def test_invalid_reference_settings_are_a_server_error_with_the_code(
    api, world, endpoint, setting, settings
):
    settings.CORTEX_SESSIONS = {**settings.CORTEX_SESSIONS, **setting}
    before = state()
    response = api.post(
        session_url(world["current"].pk, endpoint),
        _body(endpoint, "x", [{"session_id": str(world["other"].pk)}]),
        format="json",
    )
    assert response.status_code == 500
    assert response.json()["code"] == "SESSION_REFERENCE_INVALID_CONFIG"
    assert state() == before


def test_a_generous_deadline_lets_the_preparation_through(api, world, monkeypatch):
    monkeypatch.setattr(SessionViewSet, "reference_timeout", 60.0)
    response = api.post(
        session_url(world["current"].pk, PREPARE),
        {"content": "x", "references": [{"session_id": str(world["other"].pk)}]},
        format="json",
    )
    assert response.status_code == 200
    assert len(response.json()["contexts"]) == 1


# -- POST messages with resolve_references --------------------------------------------------------


def test_resolve_references_stores_the_readable_message_then_its_context(api, current, other):
    mention = format_mention("login", str(other.pk))
    response = api.post(
        session_url(current.pk, MESSAGES),
        {
            "role": "user",
            "content": f"Like {mention}?",
            "metadata": {"client": "web"},
            "resolve_references": True,
        },
        format="json",
    )

    assert response.status_code == 201
    body = response.json()
    user, context = body["messages"]
    assert (user["seq"], user["role"], user["source"]) == (2, "user", "user")
    assert user["content"] == [{"type": "text", "text": "Like @login?"}]
    assert user["metadata"] == {"client": "web"}
    assert (context["seq"], context["role"], context["source"]) == (3, "user", "session-reference")
    assert context["metadata"]["source"]["references"][0]["session_id"] == str(other.pk)
    assert snapshots(context)[0]["label"] == "login"
    assert body["session"]["message_count"] == Message.objects.filter(session=current).count()
    assert body["session"]["last_message"] == "Like @login?"
    stored = list(
        Message.objects.filter(session=current, seq__gt=1).order_by("seq").values_list("content")
    )
    assert stored == [(user["content"],), (context["content"],)]


def test_resolve_references_takes_explicit_references_too(api, current, other):
    response = api.post(
        session_url(current.pk, MESSAGES),
        {
            "role": "user",
            "content": "no mention here",
            "resolve_references": True,
            "references": [{"session_id": str(other.pk), "label": "picked"}],
        },
        format="json",
    )
    assert response.status_code == 201
    user, context = response.json()["messages"]
    assert user["content"] == [{"type": "text", "text": "no mention here"}]
    assert context["metadata"]["source"]["references"][0]["label"] == "picked"


def test_resolve_references_without_any_reference_stores_one_message(api, current):
    response = api.post(
        session_url(current.pk, MESSAGES),
        {"role": "user", "content": "just text", "resolve_references": True},
        format="json",
    )
    assert response.status_code == 201
    assert [m["source"] for m in response.json()["messages"]] == ["user"]


@pytest.mark.parametrize("flag", [None, False])
def test_without_resolve_references_a_mention_is_stored_verbatim(api, current, other, flag):
    mention = format_mention("login", str(other.pk))
    payload: dict = {"role": "user", "content": f"Like {mention}?"}
    if flag is not None:
        payload["resolve_references"] = flag
    response = api.post(session_url(current.pk, MESSAGES), payload, format="json")
    assert response.status_code == 201
    [message] = response.json()["messages"]
    assert message["content"] == [{"type": "text", "text": f"Like {mention}?"}]


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"role": "assistant", "content": "x", "resolve_references": True}, "role"),
        ({"role": "system", "content": "x", "resolve_references": True}, "role"),
        (
            {"role": "user", "source": "checkpoint", "content": "x", "resolve_references": True},
            "source",
        ),
        ({"role": "user", "content": "x", "references": []}, "references"),
        ([{"role": "user", "content": "x", "resolve_references": True}], "0.resolve_references"),
        (
            [{"role": "user", "content": "ok"}, {"role": "user", "content": "x", "references": []}],
            "1.references",
        ),
    ],
)
def test_references_where_they_do_not_apply_are_refused(api, current, payload, field):
    before = state()
    response = api.post(session_url(current.pk, MESSAGES), payload, format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "references_not_allowed"
    assert list(body["errors"]) == [field]
    assert state() == before


def test_resolve_references_must_be_a_boolean(api, current):
    response = api.post(
        session_url(current.pk, MESSAGES),
        {"role": "user", "content": "x", "resolve_references": "perhaps"},
        format="json",
    )
    assert response.status_code == 400
    assert "resolve_references" in response.json()["errors"]


def test_resolve_references_in_a_missing_or_foreign_session_is_the_usual_404(
    api, carol_session, missing_id
):
    payload = {"role": "user", "content": "x", "resolve_references": True}
    missing = api.post(session_url(missing_id, MESSAGES), payload, format="json")
    foreign = api.post(session_url(carol_session.pk, MESSAGES), payload, format="json")
    assert missing.status_code == foreign.status_code == 404
    assert missing.json() == foreign.json()
    assert missing.json()["code"] == "session_not_found"


def test_a_context_over_max_message_bytes_is_413_and_nothing_is_written(
    api, current, other, settings
):
    settings.CORTEX_SESSIONS = {**settings.CORTEX_SESSIONS, "MAX_MESSAGE_BYTES": 400}
    before = state()
    response = api.post(
        session_url(current.pk, MESSAGES),
        {
            "role": "user",
            "content": "short",
            "resolve_references": True,
            "references": [{"session_id": str(other.pk)}],
        },
        format="json",
    )
    assert response.status_code == 413
    assert response.json()["code"] == "message_too_large"
    assert state() == before


def test_the_stored_snapshot_does_not_change_when_the_referenced_session_does(
    api, current, other, alice_scope
):
    response = api.post(
        session_url(current.pk, MESSAGES),
        {
            "role": "user",
            "content": "remember " + format_mention("login", str(other.pk)),
            "resolve_references": True,
        },
        format="json",
    )
    stored = response.json()["messages"]

    services.append_messages(
        scope=alice_scope,
        session_id=other.pk,
        messages=[{"role": "user", "content": "a later, different answer"}],
    )
    services.update_session(scope=alice_scope, session_id=other.pk, title="Renamed", cwd="/x")
    services.delete_session(scope=alice_scope, session_id=other.pk)

    page = api.get(session_url(current.pk, MESSAGES)).json()["results"]
    replayed = [m for m in page if m["seq"] in {stored[0]["seq"], stored[1]["seq"]}]
    assert replayed == stored
    assert "a later, different answer" not in stored[1]["content"][0]["text"]
