"""Strict input: no coercion, undefined parameters and fields refused by name, one code per
rule, and an error table listing every code (docs/design.md §12.4; cases ``numbers-as-strings``,
``unknown-params``, ``error-codes``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rest_framework import exceptions as drf_exceptions
from rest_framework.test import APIClient

from cortex_sessions import exceptions as core
from cortex_sessions import services
from cortex_sessions.api import exceptions as api_exceptions
from cortex_sessions.models import Message, Session
from cortex_sessions.references import errors as reference_errors
from tests.api.conftest import BASE, session_url

pytestmark = pytest.mark.django_db

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture
def session(alice_scope) -> Session:
    session = services.create_session(scope=alice_scope, agent_id="a", title="kept", cwd="/w")
    services.append_messages(
        scope=alice_scope,
        session_id=session.pk,
        messages=[{"role": "user", "content": f"m{n}"} for n in range(1, 7)],
    )
    return session


def _refused(response, field: str, code: str) -> None:
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == code, body
    assert body["errors"][field][0]["code"] == code, body


# -- numbers-as-strings: no coercion ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "field", "code"),
    [
        ({"agent_id": 5}, "agent_id", "invalid_agent_id"),
        ({"agent_id": 5.5}, "agent_id", "invalid_agent_id"),
        ({"agent_id": True}, "agent_id", "invalid_agent_id"),
        ({"agent_id": "x", "title": 5}, "title", "invalid"),
        ({"agent_id": "x", "cwd": 0}, "cwd", "invalid"),
        ({"agent_id": "x", "scope": 7}, "scope", "invalid_scope"),
    ],
)
def test_create_refuses_a_number_where_a_string_goes(api, payload, field, code):
    _refused(api.post(BASE, payload, format="json"), field, code)
    assert not Session.objects.exists()


@pytest.mark.parametrize(
    ("payload", "field"),
    [({"cwd": 0}, "cwd"), ({"title": 1.0}, "title"), ({"title": None}, "title")],
)
def test_update_refuses_a_number_where_a_string_goes(api, session, payload, field):
    _refused(api.patch(session_url(session.pk), payload, format="json"), field, "invalid")
    session.refresh_from_db()
    assert (session.title, session.cwd) == ("kept", "/w")


@pytest.mark.parametrize(
    ("payload", "field", "code"),
    [
        ({"agent_id": 5}, "agent_id", "invalid_agent_id"),
        ({"agent_id": "a", "session_id": 12345}, "session_id", "invalid"),
    ],
)
def test_resolve_refuses_coercible_values(api, payload, field, code):
    _refused(api.post(f"{BASE}resolve/", payload, format="json"), field, code)
    assert not Session.objects.exists()


@pytest.mark.parametrize("value", ["yes", "true", 1, 0, None])
def test_a_boolean_takes_only_true_or_false(api, session, value):
    response = api.post(
        session_url(session.pk, "messages/"),
        {"role": "user", "content": "x", "resolve_references": value},
        format="json",
    )
    _refused(response, "resolve_references", "invalid")
    assert Message.objects.filter(session=session).count() == 6


@pytest.mark.parametrize(("field", "value"), [("role", 1), ("source", 2)])
def test_message_choices_take_only_strings(api, session, field, value):
    payload = {"role": "user", "content": "x", field: value}
    response = api.post(session_url(session.pk, "messages/"), payload, format="json")
    _refused(response, field, f"invalid_{field}")


# -- error-codes: one code per rule ----------------------------------------------------------------


@pytest.mark.parametrize("agent_id", ["", "   ", "a" * 300, "a\tb", "a\x7fb", 5, None, [], {}])
@pytest.mark.parametrize("endpoint", ["", "resolve/"])
def test_every_bad_agent_id_is_invalid_agent_id(api, agent_id, endpoint):
    response = api.post(f"{BASE}{endpoint}", {"agent_id": agent_id}, format="json")
    _refused(response, "agent_id", "invalid_agent_id")
    assert not Session.objects.exists()


@pytest.mark.parametrize("method", ["post", "patch"])
def test_every_over_long_title_is_too_long(api, session, method):
    url = BASE if method == "post" else session_url(session.pk)
    # agent_id is read-only on update: accepted there and ignored.
    response = getattr(api, method)(url, {"agent_id": "a", "title": "t" * 600}, format="json")
    _refused(response, "title", "too_long")


def test_a_csrf_failure_answers_a_code_the_docs_list(django_user_model, alice):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(alice)
    response = client.post(BASE, {"agent_id": "a"}, format="json")
    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"
    assert "`permission_denied`" in (DOCS / "api.md").read_text()


# -- unknown-params: undefined query parameters and body fields --------------------------------------


@pytest.mark.parametrize(
    ("suffix", "query", "unknown"),
    [
        ("messages/", "limit=2&before=3", ["before"]),
        ("messages/", "offset=2", ["offset"]),
        ("messages/", "limit=2&after=1&query=x", ["after", "query"]),  # q is the search
        ("", "verbose=1", ["verbose"]),
        ("reference-candidates/", "search=x", ["search"]),
    ],
)
def test_an_undefined_query_parameter_on_a_session_is_a_400_naming_it(
    api, session, suffix, query, unknown
):
    response = api.get(f"{session_url(session.pk, suffix)}?{query}")
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "invalid_filter"
    assert sorted(body["errors"]) == unknown
    assert {item["code"] for name in unknown for item in body["errors"][name]} == {
        "unknown_parameter"
    }


@pytest.mark.parametrize(
    ("path", "query", "unknown"),
    [
        ("", "metadata__team=x", "metadata__team"),
        ("", "agent=a", "agent"),
        ("count/", "limit=1", "limit"),
        ("count/", "page=2", "page"),
    ],
)
def test_an_undefined_list_filter_is_a_400_naming_it(api, session, path, query, unknown):
    response = api.get(f"{BASE}{path}?{query}")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_filter"
    assert list(response.json()["errors"]) == [unknown]


def test_a_query_parameter_on_a_write_is_refused_and_nothing_is_written(api, session):
    response = api.post(
        f"{session_url(session.pk, 'messages/')}?limit=1", {"role": "user", "content": "x"}
    )
    assert response.status_code == 400
    assert Message.objects.filter(session=session).count() == 6
    assert api.delete(f"{session_url(session.pk)}?force=1").status_code == 400
    assert Session.objects.filter(pk=session.pk).exists()


def test_scope_and_format_are_accepted_everywhere(api, session, alice_scope):
    assert api.get(f"{BASE}?format=json&scope={alice_scope}").status_code == 200
    assert api.get(f"{session_url(session.pk, 'messages/')}?format=json&limit=2").status_code == 200
    assert api.get(f"{BASE}count/?format=json&ordering=title").status_code == 200


@pytest.mark.parametrize(
    ("method", "suffix", "payload", "unknown"),
    [
        ("post", None, {"agent_id": "a", "titel": "typo"}, ["titel"]),
        ("post", "resolve/", {"agent_id": "a", "default": True}, ["default"]),
        ("patch", "", {"title": "t", "tags": ["x"]}, ["tags"]),
        ("post", "messages/", {"role": "user", "content": "x", "meta": {}}, ["meta"]),
        ("post", "messages/", [{"role": "user", "content": "x", "seq_no": 3}], ["0.seq_no"]),
    ],
)
def test_an_undefined_body_field_is_a_400_naming_it(api, session, method, suffix, payload, unknown):
    url = (
        BASE
        if suffix is None
        else (f"{BASE}{suffix}" if suffix == "resolve/" else session_url(session.pk, suffix))
    )
    response = getattr(api, method)(url, payload, format="json")
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "unknown_field"
    assert sorted(body["errors"]) == unknown
    session.refresh_from_db()
    assert (session.title, session.message_count, Session.objects.count()) == ("kept", 6, 1)


def test_read_only_fields_read_back_are_accepted_on_update(api, session):
    read = api.get(session_url(session.pk)).json()
    response = api.put(session_url(session.pk), {**read, "title": "new"}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["title"] == "new"


# -- the error table lists every code ----------------------------------------------------------------


def _subclasses(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        found |= {sub, *_subclasses(sub)}
    return found


def _codes_the_api_can_answer() -> set[str]:
    codes = {
        cls.code
        for cls in _subclasses(core.CortexSessionsError)
        if isinstance(getattr(cls, "code", None), str)
    }
    codes |= {
        cls.default_code
        for cls in _subclasses(drf_exceptions.APIException)
        if cls.__module__ in {drf_exceptions.__name__, api_exceptions.__name__}
    }
    # Field-level codes the serializers and the query check give, and the app's codes DRF's
    # own generic codes are renamed to.
    codes |= {
        "required",
        "invalid",
        "unknown_field",
        "unknown_parameter",
        "repeated_parameter",
        "empty",
        "not_a_list",
    }
    codes |= set(api_exceptions.SAME_AS_APP_CODE.values())
    # Base classes never raised themselves, and the importer's own code (not an API answer).
    codes -= {"error", "scope_error", "SESSION_REFERENCE_ERROR", "invalid_conversation"}
    return codes


def test_the_error_table_lists_every_code_the_api_can_answer():
    documented = set(
        re.findall(
            r"`([A-Za-z_]+)`", (DOCS / "api.md").read_text() + (DOCS / "references.md").read_text()
        )
    )
    missing = sorted(_codes_the_api_can_answer() - documented)
    assert missing == []
    # DRF's generic codes never reach a client, so the table does not list them.
    table = "\n".join(
        line for line in (DOCS / "api.md").read_text().splitlines() if re.match(r"\| [45]", line)
    )
    assert not set(api_exceptions.SAME_AS_APP_CODE) & set(re.findall(r"`([A-Za-z_]+)`", table))
    # The reference feature's own codes too.
    reference_codes = {cls.code for cls in _subclasses(reference_errors.SessionReferenceError)}
    assert reference_codes <= documented
