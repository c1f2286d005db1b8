"""One rule, one code, wherever an input arrives: a body, a query string, a header, a service
call or an admin form (docs/design.md §12.4–12.5).

Each section is one *kind* of fault a tester found after the strict-input work: a JSON value the
app stores but no rule bounded (nesting, surrogates), a query parameter answering another code
than its body twin, over-long text answering ``max_length``, an ordering list, ``null`` answering
DRF's ``null``, an empty scope read as "not given", a repeated parameter read as its last value,
and two ``Idempotency-Key`` headers merged into one key.
"""

from __future__ import annotations

import base64
import http.client
import json
from urllib.parse import quote, urlsplit

import pytest
from django.db import connection

from cortex_sessions import services
from cortex_sessions.api.views import SessionViewSet
from cortex_sessions.content import MAX_JSON_DEPTH
from cortex_sessions.exceptions import InvalidContent, InvalidMetadata
from cortex_sessions.models import IdempotencyKey, Message, Session
from cortex_sessions.references.errors import InvalidReference
from cortex_sessions.references.uri import decode_session_uri
from cortex_sessions.transfer import parse_conversation
from tests.api.conftest import BASE, session_url

pytestmark = pytest.mark.django_db

MERGE_PATCH = "application/merge-patch+json"


def nested(depth: int, leaf: object = 1) -> object:
    """``leaf`` inside ``depth`` objects: ``{"a": {"a": ... leaf}}``."""
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.fixture
def session(alice_scope) -> Session:
    session = services.create_session(
        scope=alice_scope, agent_id="a", title="kept", metadata={"keep": 1}
    )
    services.append_messages(
        scope=alice_scope,
        session_id=session.pk,
        messages=[{"role": "user", "content": f"m{n}"} for n in range(1, 4)],
    )
    return session


def _unchanged(session: Session) -> None:
    session.refresh_from_db()
    assert (session.title, session.metadata, session.message_count) == ("kept", {"keep": 1}, 3)
    assert Session.objects.count() == 1
    assert Message.objects.count() == 3


def _codes(response) -> tuple[str, set[str]]:
    body = response.json()
    return body["code"], {item["code"] for items in body["errors"].values() for item in items}


# -- JSON values: nested at most MAX_JSON_DEPTH deep, on every database -----------------------------


def _json_writes(session: Session, value: object) -> list[tuple[str, str, object, str]]:
    """``(method, url, body, content type)`` of every write that stores a JSON value."""
    one = session_url(session.pk)
    blocks = [{"type": "data", "value": value}]  # the block list and the block are 2 levels
    return [
        ("post", BASE, {"agent_id": "a", "metadata": value}, "application/json"),
        ("put", one, {"metadata": value}, "application/json"),
        ("patch", one, {"metadata": value}, "application/json"),
        ("patch", one, {"metadata": value}, MERGE_PATCH),
        ("post", session_url(session.pk, "fork/"), {"metadata": value}, "application/json"),
        (
            "post",
            session_url(session.pk, "messages/"),
            {"role": "user", "content": "x", "metadata": value},
            "application/json",
        ),
        (
            "post",
            session_url(session.pk, "messages/"),
            {"role": "tool", "content": blocks},
            "application/json",
        ),
    ]


def _send(api, method: str, url: str, body: object, content_type: str):
    return getattr(api, method)(url, json.dumps(body), content_type=content_type)


def test_json_nested_deeper_than_every_database_stores_is_refused_by_its_fields_code(api, session):
    """MariaDB's JSON check constraint refuses 32 levels: that was a 500 (IntegrityError) there
    and stored elsewhere; now the value is refused on every database with the field's code."""
    too_deep = nested(MAX_JSON_DEPTH + 1)  # 32 objects, one in the other
    for method, url, body, content_type in _json_writes(session, too_deep):
        response = _send(api, method, url, body, content_type)

        assert response.status_code == 400, (method, url, response.content)
        in_content = isinstance(body.get("content"), list)
        expected = "invalid_content" if in_content else "invalid_metadata"
        assert _codes(response) == (expected, {expected}), (method, url)
        _unchanged(session)


def test_json_as_deep_as_every_database_stores_is_kept(api, session):
    deepest_metadata = nested(MAX_JSON_DEPTH)  # 31 objects, one in the other
    deepest_block_value = nested(MAX_JSON_DEPTH - 2)  # inside a block inside the block list
    for method, url, body, content_type in _json_writes(session, deepest_metadata):
        if isinstance(body.get("content"), list):
            body = {**body, "content": [{"type": "data", "value": deepest_block_value}]}

        response = _send(api, method, url, body, content_type)

        assert response.status_code in (200, 201), (method, url, response.content)
    assert Session.objects.get(pk=session.pk).metadata == deepest_metadata
    assert Message.objects.filter(session=session).last().content == [
        {"type": "data", "value": deepest_block_value}
    ]


def test_the_services_refuse_json_too_deep_to_walk_with_their_codes(alice_scope, session):
    """A Python caller's value deeper than the recursion limit is the field's error, never a
    ``RecursionError`` from ``json.dumps``."""
    deep = nested(5000)
    with pytest.raises(InvalidMetadata):
        services.create_session(scope=alice_scope, agent_id="a", metadata=deep)
    with pytest.raises(InvalidMetadata):
        services.update_session(scope=alice_scope, session_id=session.pk, metadata=deep)
    with pytest.raises(InvalidContent):
        services.append_messages(
            scope=alice_scope,
            session_id=session.pk,
            messages=[{"role": "tool", "content": [{"type": "data", "value": deep}]}],
        )
    _unchanged(session)


@pytest.mark.parametrize("key", [1, True, None, 1.5, ("a",)])
def test_the_services_refuse_an_object_key_that_is_not_a_string(alice_scope, session, key):
    """JSON object keys are strings: ``json.dumps`` would store ``1`` as ``"1"`` (and
    ``{1: "a", "1": "b"}`` as two equal keys), so a Python caller's value is refused with the
    field's code before anything is written, never silently changed."""
    metadata = {key: "a", str(key): "b"}
    with pytest.raises(InvalidMetadata, match="object key that is not a string"):
        services.create_session(scope=alice_scope, agent_id="a", metadata=metadata)
    with pytest.raises(InvalidMetadata):
        services.update_session(scope=alice_scope, session_id=session.pk, metadata=metadata)
    with pytest.raises(InvalidMetadata):
        services.append_messages(
            scope=alice_scope,
            session_id=session.pk,
            messages=[{"role": "user", "content": "hi", "metadata": {"deep": [metadata]}}],
        )
    with pytest.raises(InvalidContent):
        services.append_messages(
            scope=alice_scope,
            session_id=session.pk,
            messages=[
                {"role": "user", "content": "kept?"},
                {"role": "tool", "content": [{"type": "data", "value": metadata}]},
            ],
        )
    _unchanged(session)


TOO_DEEP_TO_PARSE = "[" * 3000 + "]" * 3000


def test_json_text_too_deep_to_parse_is_refused_with_its_inputs_code(api, session):
    """Every place that parses JSON text from a client uses the one strict parser, so text
    that would exhaust Python's recursion limit is refused like any malformed text."""
    response = api.get(BASE, {"metadata": TOO_DEEP_TO_PARSE})
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_filter"

    cursor = base64.urlsafe_b64encode(TOO_DEEP_TO_PARSE[:2000].encode()).decode().rstrip("=")
    response = api.get(BASE, {"cursor": cursor})
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_filter"

    uri = "cortex-session:" + base64.urlsafe_b64encode(b"[" * 3000).decode().rstrip("=")
    with pytest.raises(InvalidReference):
        decode_session_uri(uri)
    response = api.post(
        session_url(session.pk, "references/prepare/"),
        {"content": f"see @[x]({uri})"},
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["code"] == "SESSION_REFERENCE_INVALID_REFERENCE"

    with pytest.raises(Exception) as raised:  # the importer reports the line, then goes on
        parse_conversation('{"agent_id": "a", "messages": ' + TOO_DEEP_TO_PARSE + "}")
    assert raised.value.code == "invalid_conversation"
    _unchanged(session)


# -- agent_id: every bad one is invalid_agent_id, in a body and in a query --------------------------

BAD_AGENT_IDS = ["", " ", "   ", "a\tb", "a\nb", "a\x7fb", "\x01", "a" * 256, "é" * 300]


@pytest.mark.parametrize("agent_id", BAD_AGENT_IDS)
@pytest.mark.parametrize("path", ["", "count/"])
def test_every_bad_agent_id_in_a_query_is_invalid_agent_id(api, session, path, agent_id):
    response = api.get(f"{BASE}{path}", {"agent_id": agent_id})

    assert response.status_code == 400, response.content
    assert _codes(response) == ("invalid_agent_id", {"invalid_agent_id"})
    assert list(response.json()["errors"]) == ["agent_id"]


@pytest.mark.parametrize("agent_id", [*BAD_AGENT_IDS, "a\x00b"])
def test_a_bad_agent_id_answers_the_same_code_in_a_body_and_in_a_query(api, session, agent_id):
    in_body = api.post(BASE, {"agent_id": agent_id}, format="json")
    in_query = api.get(BASE, {"agent_id": agent_id})

    assert in_body.status_code == in_query.status_code == 400
    assert _codes(in_body) == _codes(in_query)
    _unchanged(session)


# -- over-long text: every one is too_long -------------------------------------------------------


def test_every_over_long_text_is_too_long_in_a_body_and_in_a_query(api, session):
    long = "t" * 501
    one = session_url(session.pk)
    responses = {
        "create title": api.post(BASE, {"agent_id": "a", "title": long}, format="json"),
        "put title": api.put(one, {"title": long}, format="json"),
        "patch title": api.patch(one, {"title": long}, format="json"),
        "merge-patch title": _send(api, "patch", one, {"title": long}, MERGE_PATCH),
        "fork title": api.post(session_url(session.pk, "fork/"), {"title": long}, format="json"),
        "list search": api.get(BASE, {"search": long}),
        "count search": api.get(f"{BASE}count/", {"search": long}),
        "candidates q": api.get(session_url(session.pk, "reference-candidates/"), {"q": long}),
    }

    assert {name: r.status_code for name, r in responses.items()} == dict.fromkeys(responses, 400)
    assert {name: _codes(r) for name, r in responses.items()} == dict.fromkeys(
        responses, ("too_long", {"too_long"})
    )
    _unchanged(session)


def test_text_at_the_limit_is_accepted_in_a_body_and_in_a_query(api, session):
    longest = "t" * 500
    assert api.get(BASE, {"search": longest}).status_code == 200
    assert (
        api.get(session_url(session.pk, "reference-candidates/"), {"q": longest}).status_code == 200
    )
    assert api.patch(session_url(session.pk), {"title": longest}, format="json").status_code == 200


# -- ordering: one sort key ----------------------------------------------------------------------


@pytest.mark.parametrize("ordering", ["title,-created_at", "title,title", "title,", ",title"])
@pytest.mark.parametrize("path", ["", "count/"])
def test_a_list_of_sort_keys_is_a_400_invalid_filter(api, session, path, ordering):
    response = api.get(f"{BASE}{path}", {"ordering": ordering})

    assert response.status_code == 400
    assert _codes(response) == ("invalid_filter", {"invalid"})
    assert list(response.json()["errors"]) == ["ordering"]


# -- null: the field's rule, never DRF's `null` --------------------------------------------------


@pytest.mark.parametrize(
    ("url_of", "body", "field", "code"),
    [
        (lambda s: BASE, {"agent_id": "a", "metadata": None}, "metadata", "invalid_metadata"),
        (lambda s: session_url(s.pk), {"metadata": None}, "metadata", "invalid_metadata"),
        (
            lambda s: session_url(s.pk, "messages/"),
            {"role": "user", "content": "x", "metadata": None},
            "metadata",
            "invalid_metadata",
        ),
        (
            lambda s: session_url(s.pk, "messages/"),
            {"role": "user", "content": None},
            "content",
            "invalid_content",
        ),
        (
            lambda s: session_url(s.pk, "references/prepare/"),
            {"content": None},
            "content",
            "invalid_content",
        ),
        (
            lambda s: session_url(s.pk, "references/prepare/"),
            {"content": "x", "references": None},
            "references",
            "SESSION_REFERENCE_INVALID_REFERENCE",
        ),
        (lambda s: BASE, {"agent_id": "a", "title": None}, "title", "invalid"),
        (lambda s: BASE, {"agent_id": None}, "agent_id", "invalid_agent_id"),
        (lambda s: session_url(s.pk, "messages/"), [None], "0", "invalid"),
    ],
)
def test_null_answers_the_fields_rule_code(api, session, url_of, body, field, code):
    method = "patch" if url_of(session) == session_url(session.pk) else "post"

    response = getattr(api, method)(url_of(session), body, format="json")

    assert response.status_code == 400, response.content
    body = response.json()
    assert [item["code"] for item in body["errors"][field]] == [code]
    assert body["code"] == code
    _unchanged(session)


# -- an empty scope is an error, never "not given" -------------------------------------------------


def test_an_empty_scope_parameter_or_header_is_400_invalid_scope(api, session):
    requests = {
        "list ?scope=": api.get(f"{BASE}?scope="),
        "count ?scope=": api.get(f"{BASE}count/?scope="),
        "create ?scope=": api.post(f"{BASE}?scope=", {"agent_id": "a"}, format="json"),
        "delete ?scope=": api.delete(f"{session_url(session.pk)}?scope="),
        "list header": api.get(BASE, headers={"X-Cortex-Scope": ""}),
        "create header": api.post(
            BASE, {"agent_id": "a"}, format="json", headers={"X-Cortex-Scope": ""}
        ),
    }

    assert {name: r.status_code for name, r in requests.items()} == dict.fromkeys(requests, 400)
    assert {name: r.json()["code"] for name, r in requests.items()} == dict.fromkeys(
        requests, "invalid_scope"
    )
    _unchanged(session)


@pytest.mark.parametrize("parameter", ["after_seq", "before_seq", "limit"])
def test_an_empty_page_bound_is_a_400_not_the_default(api, session, parameter):
    response = api.get(f"{session_url(session.pk, 'messages/')}?{parameter}=")
    assert response.status_code == 400
    assert response.json()["errors"][parameter][0]["code"] == "invalid"


def test_an_empty_after_seq_never_deletes_every_message(api, session):
    response = api.delete(f"{session_url(session.pk, 'messages/')}?after_seq=")

    assert response.status_code == 400
    assert _codes(response) == ("invalid_filter", {"invalid"})
    _unchanged(session)


# -- a parameter given twice is refused, never read as its last value ------------------------------

#: A valid value of every query parameter of the API.
VALID_VALUES = {
    "agent_id": "a",
    "exact": "false",
    "default_only": "false",
    "search": "k",
    "ordering": "title",
    "archived": "any",
    "metadata": '{"keep": 1}',
    "limit": "2",
    "offset": "0",
    "cursor": "",
    "after_seq": "1",
    "before_seq": "3",
    "q": "k",
    "format": "json",
}


def _parameters_of_every_operation(session: Session) -> list[tuple[str, str, str]]:
    """``(method, url, parameter)`` for every parameter every read or delete takes."""
    operations = {
        "list": ("get", BASE),
        "count": ("get", f"{BASE}count/"),
        "messages.get": ("get", session_url(session.pk, "messages/")),
        "messages.delete": ("delete", session_url(session.pk, "messages/")),
        "reference_candidates": ("get", session_url(session.pk, "reference-candidates/")),
    }
    found = []
    for action, (method, url) in operations.items():
        for parameter in sorted(
            SessionViewSet.query_parameters[action] | SessionViewSet.common_query_parameters
        ):
            found.append((method, url, parameter))
    return found


def test_every_parameter_given_twice_is_a_400_naming_it(api, session, alice_scope):
    values = {**VALID_VALUES, "scope": alice_scope}
    checked = 0
    for method, url, parameter in _parameters_of_every_operation(session):
        value = quote(values[parameter], safe="")
        query = f"{parameter}={value}&{parameter}={value}"  # the same value twice, even

        response = getattr(api, method)(f"{url}?{query}")

        assert response.status_code == 400, (method, url, parameter, response.content)
        assert _codes(response) == ("invalid_filter", {"repeated_parameter"}), (url, parameter)
        assert list(response.json()["errors"]) == [parameter]
        checked += 1
    assert checked >= 30
    _unchanged(session)


def test_a_parameter_given_once_with_its_valid_value_is_accepted(api, session, alice_scope):
    """The values :func:`test_every_parameter_given_twice_is_a_400_naming_it` repeats are
    valid, so the 400 there is the repetition's."""
    values = {**VALID_VALUES, "scope": alice_scope}
    for method, url, parameter in _parameters_of_every_operation(session):
        if method == "delete":
            continue  # a delete that succeeds changes the session the other checks use
        if parameter == "q" and "reference-candidates" not in url and connection.vendor == "mysql":
            continue  # no message search there: a documented 400 (tests/test_search_databases.py)
        response = getattr(api, method)(url, {parameter: values[parameter]})
        assert response.status_code == 200, (url, parameter, response.content)


@pytest.mark.parametrize(
    "text",
    [
        '{"agent_id": "a", "agent_id": "b"}',
        '{"agent_id": "a", "metadata": {"team": "x", "team": "y"}}',
        '{"agent_id": "a", "metadata": {"k": [{"v": 1, "v": 1}]}}',
    ],
)
def test_a_key_given_twice_in_a_body_is_refused_never_read_as_its_last_value(api, session, text):
    """The body twin of a repeated query parameter: JSON objects with a repeated name are
    refused wherever JSON text is parsed, not read as the last value."""
    response = api.post(BASE, text, content_type="application/json")

    assert response.status_code == 400
    assert response.json()["code"] == "parse_error"
    assert "twice" in response.json()["detail"]
    _unchanged(session)


def test_a_key_given_twice_in_the_metadata_filter_is_refused(api, session):
    response = api.get(BASE, {"metadata": '{"keep": 1, "keep": 2}'})

    assert response.status_code == 400
    assert _codes(response) == ("invalid_filter", {"invalid_filter"})


# -- Idempotency-Key: two headers are detectable -----------------------------------------------------


@pytest.mark.parametrize("key", ["k1,k2", "k1, k2", ",", "k1,", "a" * 100 + "," + "b" * 100])
def test_a_key_with_a_comma_is_invalid_and_writes_nothing(api, session, key):
    response = api.post(BASE, {"agent_id": "a"}, format="json", headers={"Idempotency-Key": key})

    assert response.status_code == 400
    assert _codes(response) == ("invalid_idempotency_key", {"invalid_idempotency_key"})
    assert not IdempotencyKey.objects.exists()
    _unchanged(session)


def _raw_request(live_server, path: str, headers: list[tuple[str, str]], body: bytes = b""):
    """Send a request with ``headers`` as given — a name may repeat — to the live server."""
    location = urlsplit(live_server.url)
    connection = http.client.HTTPConnection(location.hostname, location.port, timeout=30)
    try:
        connection.putrequest("POST" if body else "GET", path)
        for name, value in headers:
            connection.putheader(name, value)
        connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


@pytest.mark.django_db(transaction=True)
def test_two_headers_that_the_server_joins_with_a_comma_are_refused(live_server, make_user):
    """The WSGI server joins repeated headers into one value with ", " (PEP 3333 / RFC 9110):
    two Idempotency-Key headers become a key holding a comma, two X-Cortex-Scope headers a
    scope whose level holds an unescaped '=' — both a 400, nothing written."""
    carol = make_user("carol", org="acme")
    mine = f"org=acme/user={carol.pk}"
    auth = ("Authorization", "Basic " + base64.b64encode(b"carol:pw").decode())
    json_type = ("Content-Type", "application/json")
    body = json.dumps({"agent_id": "a"}).encode()

    status, answer = _raw_request(
        live_server,
        BASE,
        [auth, json_type, ("Idempotency-Key", "k1"), ("Idempotency-Key", "k2")],
        body,
    )
    assert (status, answer["code"]) == (400, "invalid_idempotency_key")

    status, answer = _raw_request(
        live_server, BASE, [auth, ("X-Cortex-Scope", mine), ("X-Cortex-Scope", mine)]
    )
    assert (status, answer["code"]) == (400, "invalid_scope")
    assert not Session.objects.exists()

    # Each header sent once is fine.
    status, _ = _raw_request(live_server, BASE, [auth, ("X-Cortex-Scope", mine)])
    assert status == 200
    status, _ = _raw_request(live_server, BASE, [auth, json_type, ("Idempotency-Key", "k1")], body)
    assert status == 201
    assert Session.objects.count() == 1
