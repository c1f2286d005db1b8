"""Error handling: one body shape, a 4xx with a code for every bad request (docs/design.md §7.3)."""

from __future__ import annotations

import json

import pytest
from rest_framework.response import Response

from cortex_sessions import services
from cortex_sessions.api.exceptions import exception_handler, status_for
from cortex_sessions.models import Message, Session
from tests.api.conftest import BASE, session_url

pytestmark = pytest.mark.django_db

NOT_FOUND = {"code": "session_not_found", "detail": "Session not found."}


@pytest.fixture
def session(alice_scope):
    return services.create_session(scope=alice_scope, agent_id="coder", title="Original")


def post_raw(api, url, body, content_type="application/json", method="post"):
    return getattr(api, method)(url, body, content_type=content_type)


@pytest.mark.parametrize(
    "body",
    [
        b"{bad json",
        b'{"agent_id": "a",}',
        b'{"agent_id": NaN}',
        b'{"agent_id": "a", "metadata": {"x": Infinity}}',
        b'{"agent_id": "a", "metadata": {"x": 1e999}}',
        b'{"agent_id": "a", "title": "\\ud800"}',
        b'{"agent_id": "\xff\xfe"}',
        b'{"agent_id": "a", "metadata": ' + b'{"a": ' * 100 + b"1" + b"}" * 100 + b"}",
        b'{"agent_id": "a", "metadata": {"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}",
        b'{"agent_id": "a", "metadata": {"n": ' + b"9" * 5000 + b"}}",
    ],
    ids=[
        "syntax",
        "trailing-comma",
        "nan",
        "infinity",
        "overflowing-float",
        "lone-surrogate",
        "invalid-utf8",
        "too-deep",
        "very-deep",
        "huge-integer",
    ],
)
def test_malformed_json_is_a_400_parse_error_and_nothing_is_written(api, body):
    response = post_raw(api, BASE, body)
    assert response.status_code == 400
    assert response.json()["code"] == "parse_error"
    assert set(response.json()) == {"code", "detail"}
    assert not Session.objects.exists()


@pytest.mark.parametrize(
    ("method", "suffix"),
    [("post", ""), ("post", "resolve/"), ("patch", "{id}"), ("put", "{id}")],
)
@pytest.mark.parametrize("body", ["[]", '[{"agent_id": "a"}]', '"text"', "42", "null"])
def test_a_non_object_body_where_an_object_is_expected_is_a_400(api, session, method, suffix, body):
    url = BASE + suffix.format(id=f"{session.pk}/")
    response = post_raw(api, url, body, method=method)
    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
    assert "non_field_errors" in response.json()["errors"]
    assert Session.objects.get().title == "Original"


def test_a_body_over_data_upload_max_memory_size_is_a_413(api, session, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    body = json.dumps({"role": "user", "content": "x" * 2000})
    response = post_raw(api, session_url(session.pk, "messages/"), body)
    assert response.status_code == 413
    assert response.json()["code"] == "request_too_large"
    assert not Message.objects.exists()


def test_a_form_body_is_a_415(api):
    response = api.post(BASE, {"agent_id": "a"}, format="multipart")
    assert response.status_code == 415
    assert response.json()["code"] == "unsupported_media_type"


def test_a_non_text_charset_is_a_400(api):
    response = post_raw(api, BASE, b'{"agent_id": "a"}', "application/json; charset=bz2_codec")
    assert response.status_code == 400
    assert response.json()["code"] == "parse_error"


def test_a_method_not_allowed_has_a_code(api):
    response = api.delete(BASE)
    assert response.status_code == 405
    assert response.json()["code"] == "method_not_allowed"


@pytest.mark.parametrize("field", ["title", "agent_id", "cwd"])
def test_nul_in_a_body_string_has_the_same_code_as_in_metadata(api, field):
    body = {"agent_id": "a", field: "bad\x00value"}
    response = api.post(BASE, body, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "nul_character"
    assert response.json()["errors"][field][0]["code"] == "nul_character"
    metadata = api.post(BASE, {"agent_id": "a", "metadata": {"k": "\x00"}}, format="json")
    assert metadata.json()["code"] == "nul_character"
    assert not Session.objects.exists()


def test_nul_in_a_query_parameter_is_a_400(api):
    response = api.get(BASE, {"agent_id": "a\x00", "search": "b\x00"})
    assert response.status_code == 400
    assert set(response.json()["errors"]) == {"agent_id", "search"}
    assert response.json()["errors"]["search"][0]["code"] == "nul_character"


@pytest.mark.parametrize(
    "bad_id",
    [
        "not-a-uuid",
        "123",
        "01234567-89ab-cdef-0123-456789abcdeX",
        "abc.def",
        "%00",
        "%20",
        "x" * 300,
    ],
)
@pytest.mark.parametrize(
    ("method", "suffix", "body"),
    [
        ("get", "", None),
        ("patch", "", {"title": "x"}),
        ("put", "", {"title": "x"}),
        ("delete", "", None),
        ("post", "make-default/", None),
        ("get", "messages/", None),
        ("post", "messages/", {"role": "user", "content": "x"}),
    ],
)
def test_a_malformed_session_id_is_the_same_404_as_a_missing_one(
    api, missing_id, bad_id, method, suffix, body
):
    bad = getattr(api, method)(session_url(bad_id, suffix), body, format="json")
    missing = getattr(api, method)(session_url(missing_id, suffix), body, format="json")
    assert bad.status_code == missing.status_code == 404
    assert bad.json() == missing.json() == NOT_FOUND


def test_our_handler_is_used_even_when_the_host_sets_another(api, settings, missing_id):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "EXCEPTION_HANDLER": "tests.api.test_errors.host_handler",
        "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
        "DEFAULT_PAGINATION_CLASS": None,
    }
    assert api.get(session_url(missing_id)).json() == NOT_FOUND
    assert api.get(BASE).json() == {"count": 0, "next": None, "previous": None, "results": []}


def test_host_allow_any_does_not_open_the_api_to_anonymous_clients(client_for, settings):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
    }
    response = client_for(None).get(BASE)
    assert response.status_code in (401, 403)
    assert response.json()["code"] == "not_authenticated"


def host_handler(exc, context):
    return Response({"host": "handler"}, status=418)


@pytest.mark.parametrize("path", ["", "{id}/", "{id}/messages/", "count/"])
def test_the_browsable_api_renders_errors_without_crashing(client_for, path, missing_id):
    response = client_for(None).get(BASE + path.format(id=missing_id), HTTP_ACCEPT="text/html")
    assert response.status_code in (401, 403)


def test_the_browsable_api_renders_a_list(api, session):
    response = api.get(BASE, HTTP_ACCEPT="text/html")
    assert response.status_code == 200
    assert b"Original" in response.content


def test_an_error_with_http_status_and_code_maps_generically():
    class ReferenceError_(Exception):
        code = "SESSION_REFERENCE_BUDGET_EXCEEDED"
        http_status = 413

    exc = ReferenceError_("too big")
    assert status_for(exc) == 413
    response = exception_handler(exc, {})
    assert response.status_code == 413
    assert response.data == {"code": "SESSION_REFERENCE_BUDGET_EXCEEDED", "detail": "too big"}


def test_an_unexpected_exception_is_not_swallowed():
    assert exception_handler(RuntimeError("bug"), {}) is None


@pytest.mark.parametrize("path", ["", "{id}/", "{id}/messages/", "count/", "{missing}/", "bad/"])
def test_the_browsable_api_renders_pages_without_crashing(api, session, missing_id, path):
    url = BASE + path.format(id=session.pk, missing=missing_id)
    response = api.get(url, HTTP_ACCEPT="text/html")
    assert response.status_code in (200, 404)
    assert response["Content-Type"].startswith("text/html")


@pytest.mark.parametrize("path", ["", "{id}/", "{missing}/", "bad/", "{id}/messages/", "count/"])
def test_options_describes_the_endpoint_without_revealing_other_sessions(
    api, session, missing_id, path
):
    response = api.options(BASE + path.format(id=session.pk, missing=missing_id))
    assert response.status_code == 200
    if path in ("{missing}/", "bad/"):
        assert "actions" not in response.json()


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"agent_id": "a", "title": "x\x00"}, 400, "nul_character"),
        ({"agent_id": "a", "metadata": {"k\x00": 1}}, 400, "nul_character"),
        ({"agent_id": "a", "bogus\x00": 1}, 400, "unknown_field"),
        ({"agent_id": "a", "bogus": "x\x00"}, 400, "unknown_field"),
        ({"agent_id": "a", "created_at": "x\x00"}, 201, None),  # read-only: ignored
    ],
    ids=["field", "key in a field", "unknown key", "in an unknown key", "read-only"],
)
def test_which_code_a_nul_in_the_body_answers(api, body, status, code):
    """docs/api.md: ``nul_character`` in a field the body may set; a key the endpoint does not
    define is ``unknown_field`` and a read-only field is ignored, whatever they hold."""
    response = api.post(BASE, body, format="json")
    assert response.status_code == status
    assert response.json().get("code") == code
    assert Session.objects.count() == (1 if status == 201 else 0)


@pytest.mark.parametrize(
    ("path", "body", "code"),
    [
        ("resolve/", {"agent_id": "a", "session_id": "{id}\x00"}, "invalid"),
        ("{id}/fork/", {"up_to_seq": "1\x00"}, "invalid_up_to_seq"),
        ("{id}/messages/", {"content": "x", "resolve_references": "true\x00"}, "invalid"),
        (
            "{id}/messages/",
            {
                "role": "user",
                "content": "x",
                "resolve_references": True,
                "references": [{"session_id": "\x00"}],
            },
            "SESSION_REFERENCE_INVALID_REFERENCE",
        ),
    ],
    ids=["uuid", "integer", "boolean", "reference id"],
)
def test_a_nul_in_a_typed_field_answers_that_fields_own_code(api, session, path, body, code):
    """docs/api.md: a UUID, integer or boolean field holding a NUL is a value of the wrong
    type, so it answers its type's code, not ``nul_character``; nothing is written."""
    body = {
        key: value.replace("{id}", str(session.pk)) if isinstance(value, str) else value
        for key, value in body.items()
    }
    response = api.post(BASE + path.format(id=session.pk), body, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == code
    assert (Session.objects.count(), Message.objects.count()) == (1, 0)
