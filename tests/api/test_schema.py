"""The OpenAPI schema: valid, complete, and true to the API (docs/design.md §7.3).

The schemathesis run generates requests from the schema and sends them to the example
project's WSGI application in-process (authenticated with HTTP Basic as an org member),
checking that no response is a 5xx and that every response matches the schema.

The runs are derandomized (the same examples every time) unless a seed is given:
``pytest --fuzz-seed=random`` (a new seed each run, printed at the start and the end, as CI
runs it) or ``--fuzz-seed=N`` to replay one (default: ``$CORTEX_FUZZ_SEED``; tests/conftest.py).
``CORTEX_FUZZ_EXAMPLES`` sets the examples per operation and mode, e.g.
``CORTEX_FUZZ_EXAMPLES=200 pytest --fuzz-seed=7 tests/api/test_schema.py``.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import uuid
from pathlib import Path

import jsonschema
import pytest

pytest.importorskip("schemathesis", reason="the fuzz extra is not installed")
import schemathesis
import yaml
from django.core import signals
from django.core.handlers.wsgi import WSGIHandler
from django.core.management import call_command
from django.db import close_old_connections, connection
from hypothesis import HealthCheck, given, seed, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    missing_required_header,
    negative_data_rejection,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
    unsupported_method,
)

from cortex_sessions import services
from cortex_sessions.conf import app_settings
from cortex_sessions.content import check_json_value
from cortex_sessions.exceptions import InvalidInput
from cortex_sessions.metadata import check_metadata_filter, filter_by_metadata
from cortex_sessions.models import Session
from example_project.tenancy.models import Membership

pytestmark = pytest.mark.django_db

OPERATIONS = {
    ("/api/cortex/sessions/", "get"),
    ("/api/cortex/sessions/", "post"),
    ("/api/cortex/sessions/count/", "get"),
    ("/api/cortex/sessions/resolve/", "post"),
    ("/api/cortex/sessions/{id}/", "get"),
    ("/api/cortex/sessions/{id}/", "put"),
    ("/api/cortex/sessions/{id}/", "patch"),
    ("/api/cortex/sessions/{id}/", "delete"),
    ("/api/cortex/sessions/{id}/make-default/", "post"),
    ("/api/cortex/sessions/{id}/messages/", "get"),
    ("/api/cortex/sessions/{id}/messages/", "post"),
    ("/api/cortex/sessions/{id}/messages/", "delete"),
    ("/api/cortex/sessions/{id}/messages/pop/", "post"),
    ("/api/cortex/sessions/{id}/messages/{seq}/", "delete"),
    ("/api/cortex/sessions/{id}/fork/", "post"),
    ("/api/cortex/sessions/{id}/archive/", "post"),
    ("/api/cortex/sessions/{id}/unarchive/", "post"),
    ("/api/cortex/sessions/{id}/reference-candidates/", "get"),
    ("/api/cortex/sessions/{id}/references/prepare/", "post"),
}


@pytest.fixture
def schema_document(tmp_path, settings):
    """The example project's schema, generated with ``spectacular --validate --fail-on-warn``
    (which raises on any warning or on a schema that breaks the OpenAPI 3 JSON schema)."""
    settings.ROOT_URLCONF = "example_project.urls"
    path = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(path))
    return yaml.safe_load(path.read_text())


def test_schema_is_valid_and_describes_every_endpoint(schema_document):
    described = {
        (path, method) for path, item in schema_document["paths"].items() for method in item
    }
    assert described >= OPERATIONS


def test_schema_documents_every_filter_and_error(schema_document):
    paths = schema_document["paths"]
    list_params = {p["name"] for p in paths["/api/cortex/sessions/"]["get"]["parameters"]}
    assert {
        "agent_id",
        "exact",
        "default_only",
        "search",
        "ordering",
        "limit",
        "offset",
        "scope",
        "X-Cortex-Scope",
    } <= list_params
    count_params = {p["name"] for p in paths["/api/cortex/sessions/count/"]["get"]["parameters"]}
    assert {"agent_id", "exact", "default_only", "search", "archived", "metadata"} <= count_params
    assert {"archived", "metadata"} <= list_params
    messages = paths["/api/cortex/sessions/{id}/messages/"]["get"]
    searches = [p for p in messages["parameters"] if p["name"] == "q"]
    if connection.vendor == "mysql":  # no message search there: the schema does not offer q
        assert "q" not in list_params and "q" not in count_params and searches == []
    else:
        assert "q" in list_params and "q" in count_params
        (q,) = searches
        assert q["schema"]["maxLength"] == 1000 and q["schema"]["minLength"] == 1
    page = schema_document["components"]["schemas"]["MessagePage"]["properties"]["results"]
    listed = schema_document["components"]["schemas"][page["items"]["$ref"].rsplit("/", 1)[1]]
    assert "match" in listed["properties"] and "match" not in listed.get("required", [])
    patch = paths["/api/cortex/sessions/{id}/"]["patch"]["requestBody"]["content"]
    assert {"application/json", "application/merge-patch+json"} <= set(patch)
    for path, method in [
        ("/api/cortex/sessions/{id}/messages/", "delete"),
        ("/api/cortex/sessions/{id}/messages/pop/", "post"),
        ("/api/cortex/sessions/{id}/messages/{seq}/", "delete"),
    ]:
        assert "session_archived" in paths[path][method]["responses"]["409"]["description"]
    for path, method in OPERATIONS:
        responses = paths[path][method]["responses"]
        assert {"400", "401", "403"} <= set(responses), (path, method)
        if "{id}" in path:
            assert "404" in responses, (path, method)
        error_schema = responses["403"]["content"]["application/json"]["schema"]
        assert error_schema == {"$ref": "#/components/schemas/Error"}
    assert "409" in paths["/api/cortex/sessions/{id}/make-default/"]["post"]["responses"]
    assert "413" in paths["/api/cortex/sessions/{id}/messages/"]["post"]["responses"]
    compact = paths["/api/cortex/sessions/{id}/compact/"]["post"]["responses"]
    assert "`summary_too_large`" in compact["400"]["description"]
    assert "message_too_large" not in compact["413"]["description"]
    append = paths["/api/cortex/sessions/{id}/messages/"]["post"]["responses"]
    for responses in (compact, append):
        assert "`token_counter_failed`" in responses["503"]["description"]


def _parameter(schema_document, path: str, method: str, name: str) -> dict:
    (found,) = [
        p for p in schema_document["paths"][path][method]["parameters"] if p["name"] == name
    ]
    return found


def test_schema_states_what_the_server_refuses_in_parameters(schema_document):
    """The rules of docs/design.md §12.4 that a parameter's schema can state, stated: one sort
    key (a comma list is refused), a non-empty scope, a comma-free Idempotency-Key, the agent
    id's pattern."""
    ordering = _parameter(schema_document, "/api/cortex/sessions/", "get", "ordering")
    assert ordering["schema"]["enum"] and not any("," in v for v in ordering["schema"]["enum"])
    assert "refused" in ordering["description"]
    for name in ("scope", "X-Cortex-Scope"):
        scope = _parameter(schema_document, "/api/cortex/sessions/", "get", name)["schema"]
        assert scope["minLength"] == 1
        assert not re.search(scope["pattern"], "")
        assert re.search(scope["pattern"], "org=acme/user=1")
        assert not re.search(scope["pattern"], "org=acme/user=1,org=acme/user=1")
    key = _parameter(schema_document, "/api/cortex/sessions/", "post", "Idempotency-Key")
    assert re.search(key["schema"]["pattern"], "k-1.~!")
    assert not re.search(key["schema"]["pattern"], "k1,k2")
    agent = _parameter(schema_document, "/api/cortex/sessions/", "get", "agent_id")["schema"]
    body = schema_document["components"]["schemas"]["SessionCreate"]["properties"]["agent_id"]
    assert (agent["pattern"], agent["maxLength"]) == (body["pattern"], body["maxLength"])


def test_schema_states_the_metadata_filter_the_scope_pair_and_the_request_bounds(
    schema_document, settings
):
    """The contract gaps of docs/design.md §12.4 and §12.6: ``metadata`` was ``{type: string, format: json}``, so ``h`` was
    schema-valid and answered 400; the scope header and parameter that differ were an unstated
    400; the bounds of a request are stated as the server reads them."""
    for path in ("/api/cortex/sessions/", "/api/cortex/sessions/count/"):
        metadata = _parameter(schema_document, path, "get", "metadata")
        assert "schema" not in metadata
        (media,) = metadata["content"]
        assert media == "application/json"
        object_schema = metadata["content"][media]["schema"]
        validator = jsonschema.Draft7Validator(object_schema)
        assert validator.is_valid({"k": "v"}) and validator.is_valid({"n": {"deep": [1]}})
        for refused in ("h", 1, [], None, {f"k{n}": n for n in range(11)}):
            assert not validator.is_valid(refused), refused
    for path, method in OPERATIONS:
        description = schema_document["paths"][path][method]["responses"]["400"]["description"]
        assert "X-Cortex-Scope" in description and "invalid_scope" in description, (path, method)
    schemas = schema_document["components"]["schemas"]
    (_, listed) = schemas["MessageInputOrList"]["oneOf"]
    assert listed["maxItems"] == 1000
    for name in ("SessionCreate", "PatchedSessionUpdate", "PatchedSessionMergePatch", "Fork"):
        assert schemas[name]["properties"]["metadata"]["maxProperties"] == 1000, name
    assert "maxProperties" not in schemas["Session"]["properties"]["metadata"]  # as stored
    assert (
        "too_many_messages"
        in (
            schema_document["paths"]["/api/cortex/sessions/{id}/messages/"]["post"]["responses"][
                "400"
            ]["description"]
        )
    )


def test_schema_states_the_bounds_the_server_reads_now(tmp_path, settings):
    settings.ROOT_URLCONF = "example_project.urls"
    settings.CORTEX_SESSIONS = {"MAX_MESSAGES_PER_APPEND": 7, "MAX_JSON_KEYS": 150}
    path = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(path))
    schemas = yaml.safe_load(path.read_text())["components"]["schemas"]
    assert schemas["MessageInputOrList"]["oneOf"][1]["maxItems"] == 7
    assert schemas["SessionCreate"]["properties"]["metadata"]["maxProperties"] == 150


def _one_of_lists(node):
    if isinstance(node, dict):
        if isinstance(node.get("oneOf"), list):
            yield node["oneOf"]
        for value in node.values():
            yield from _one_of_lists(value)
    elif isinstance(node, list):
        for value in node:
            yield from _one_of_lists(value)


def test_no_one_of_has_two_branches_that_take_the_same_value(schema_document):
    """``title`` and ``cwd`` were ``oneOf`` a no-NUL string and an empty string: ``""`` matched
    both, so by the schema ``""`` was invalid (``oneOf`` means exactly one) while the server
    stores it. schemathesis sent it as a negative case and the server accepted it."""
    one_ofs = list(_one_of_lists(schema_document))
    assert one_ofs  # content is a string or a list of blocks
    components = {"components": schema_document["components"]}  # so that $refs resolve
    for branches in one_ofs:
        validators = [jsonschema.Draft7Validator({**b, **components}) for b in branches]
        for probe in ("", "x", [], [{"type": "text", "text": "x"}], {}):
            taking = [v for v in validators if v.is_valid(probe)]
            assert len(taking) <= 1, (probe, branches)


def test_title_and_cwd_take_the_empty_string_and_refuse_nul_in_every_body(schema_document):
    schemas = schema_document["components"]["schemas"]
    for name in ("SessionCreate", "PatchedSessionUpdate", "PatchedSessionMergePatch", "Fork"):
        for field in ("title", "cwd") if name != "Fork" else ("title",):
            schema = schemas[name]["properties"][field]
            validator = jsonschema.Draft7Validator(schema)
            assert validator.is_valid(""), (name, field, schema)
            assert not validator.is_valid("a\x00"), (name, field, schema)


def test_fork_body_states_what_create_refuses(schema_document):
    """Fork's ``title`` and ``metadata`` follow create's rules, so neither is nullable, and
    ``up_to_seq`` is an integer (``null`` is ``invalid_up_to_seq``), docs/design.md §11.1."""
    schemas = schema_document["components"]["schemas"]
    fork = schemas["Fork"]["properties"]
    create = schemas["SessionCreate"]["properties"]
    assert not any(field.get("nullable") for field in fork.values())
    assert {key: fork["title"][key] for key in ("type", "maxLength", "pattern")} == {
        key: create["title"][key] for key in ("type", "maxLength", "pattern")
    }
    assert fork["metadata"]["type"] == create["metadata"]["type"] == "object"
    assert (fork["up_to_seq"]["type"], fork["up_to_seq"]["minimum"]) == ("integer", 0)


def test_message_bodies_state_what_the_server_refuses(schema_document):
    """Found by schemathesis runs with other seeds: schema-valid bodies the server refused.
    A message's ``source`` of ``session-reference`` (only the app writes those), a blank
    string content (``empty_content``), an empty list of messages (``empty``), a NUL in a
    block's ``type`` or ``text`` or in a reference's ``label``."""
    schemas = schema_document["components"]["schemas"]
    components = {"components": schema_document["components"]}

    def valid(schema, value):
        return jsonschema.Draft7Validator({**schema, **components}).is_valid(value)

    for name in ("MessageInput", "MessageWithReferencesInput"):
        source = schemas[name]["properties"]["source"]
        assert valid(source, "checkpoint") and not valid(source, "session-reference"), name
    assert valid(schemas["Message"]["properties"]["source"], "session-reference")  # as read
    for name in ("MessageInput", "ReferencePrepare"):
        content = schemas[name]["properties"]["content"]
        assert valid(content, "x") and valid(content, [{"type": "text", "text": "x"}])
        for refused in (
            "",
            " \t\u3000",
            "a\x00",
            [{"type": "x\x00"}],
            [{"type": "text", "text": "\x00"}],
        ):
            assert not valid(content, refused), (name, refused)
        assert valid(content, "\x01"), name  # a control character is content, not blank
    listed = {"$ref": "#/components/schemas/MessageInputOrList"}
    assert not valid(listed, []) and valid(listed, [{"role": "user", "content": "x"}])
    label = schemas["ReferencePrepare"]["properties"]["references"]["items"]["properties"]["label"]
    assert valid(label, "ok") and not valid(label, "a\x00")


REFERENCE_CODES = {
    "400": [
        "SESSION_REFERENCE_INVALID_REFERENCE",
        "SESSION_REFERENCE_SELF_REFERENCE",
        "SESSION_REFERENCE_TOO_MANY",
    ],
    "404": ["session_not_found", "SESSION_REFERENCE_READ_FAILED"],
    "413": ["SESSION_REFERENCE_BUDGET_EXCEEDED"],
    "500": ["SESSION_REFERENCE_INVALID_CONFIG"],
    "503": ["SESSION_REFERENCE_CANCELLED"],
}


@pytest.mark.parametrize(
    "path", ["/api/cortex/sessions/{id}/messages/", "/api/cortex/sessions/{id}/references/prepare/"]
)
def test_schema_documents_every_reference_error(schema_document, path):
    responses = schema_document["paths"][path]["post"]["responses"]
    for status, codes in REFERENCE_CODES.items():
        for code in codes:
            assert code in responses[status]["description"], (path, status, code)
    if path.endswith("messages/"):
        assert "references_not_allowed" in responses["400"]["description"]


def test_schema_describes_the_reference_bodies(schema_document):
    paths = schema_document["paths"]
    schemas = schema_document["components"]["schemas"]
    candidates = paths["/api/cortex/sessions/{id}/reference-candidates/"]["get"]
    assert {"q", "limit", "id"} <= {p["name"] for p in candidates["parameters"]}
    assert {"400", "404"} <= set(candidates["responses"])
    listed = schemas["ReferenceCandidateList"]["properties"]["results"]["items"]["$ref"]
    assert set(schemas[listed.rsplit("/", 1)[1]]["properties"]) == {
        "session_id",
        "label",
        "cwd",
        "created_at",
        "same_workspace",
        "mention",
    }
    assert set(schemas["ReferencePrepare"]["properties"]) == {"content", "references"}
    assert set(schemas["PreparedReferences"]["properties"]) == {"content", "contexts"}
    single = schemas["MessageWithReferencesInput"]["properties"]
    assert {"resolve_references", "references"} <= set(single)


def test_example_project_serves_the_schema_and_swagger_ui(client, settings):
    settings.ROOT_URLCONF = "example_project.urls"
    assert client.get("/api/schema/").status_code == 200
    assert client.get("/api/docs/").status_code == 200


# -- schemathesis ---------------------------------------------------------------------------------

USERNAME, PASSWORD = "fuzzer", "fuzz-password"
AUTH = "Basic " + base64.b64encode(f"{USERNAME}:{PASSWORD}".encode()).decode()


def fuzzing(max_examples: int, fuzz_seed: int | None):
    """Hypothesis settings of a schemathesis run: ``max_examples`` (or
    ``CORTEX_FUZZ_EXAMPLES``) examples, drawn from ``fuzz_seed`` (the ``fuzz_seed`` fixture:
    ``--fuzz-seed``), derandomized when it is ``None``."""
    examples = int(os.environ.get("CORTEX_FUZZ_EXAMPLES") or max_examples)
    configured = settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=fuzz_seed is None,
        database=None,
    )

    def apply(test):
        test = configured(test)
        return test if fuzz_seed is None else seed(fuzz_seed)(test)

    return apply


@pytest.fixture
def wsgi_app(settings, django_user_model):
    """The example project as a WSGI application, inside the test's transaction.

    Django's handler closes "obsolete" connections at each request's start and end, which would
    end the test transaction; like Django's test client, we disconnect that for the test.
    """
    settings.ROOT_URLCONF = "example_project.urls"
    settings.ALLOWED_HOSTS = ["*"]
    settings.CORTEX_SESSIONS = {
        "SCOPE_RESOLVER": "example_project.tenancy.resolver.org_scope_resolver"
    }
    user = django_user_model.objects.create_user(username=USERNAME, password=PASSWORD)
    Membership.objects.create(user=user, org="acme")
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    app = WSGIHandler()
    app.scope = f"org=acme/user={user.pk}"
    try:
        yield app
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


def live_session(scope: str):
    """A fresh session of the fuzzing user, with two messages (one per example, since a
    DELETE or a PUT may have changed the last one)."""
    session = services.create_session(scope=scope, agent_id="fuzz", title="live")
    services.append_messages(
        scope=scope,
        session_id=session.pk,
        messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
    )
    return session


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]

DOCS = Path(__file__).resolve().parents[2] / "docs"


@functools.cache
def documented_codes() -> frozenset[str]:
    """Every code the docs' error tables name (docs/api.md, docs/references.md)."""
    text = (DOCS / "api.md").read_text() + (DOCS / "references.md").read_text()
    return frozenset(re.findall(r"`([A-Za-z_]+)`", text))


def assert_codes_documented(response) -> None:
    """Every code of an error body — at the top and per field — is in the docs' error table
    (docs/design.md §12.4), so a DRF default such as ``null`` or ``max_length`` never
    reaches a client unlisted."""
    content_type = " ".join(response.headers.get("content-type", []))
    if response.status_code < 400 or "json" not in content_type:
        return
    body = response.json()
    codes = {body["code"]} | {
        item["code"] for items in body.get("errors", {}).values() for item in items
    }
    assert codes <= documented_codes(), (sorted(codes - documented_codes()), body)


@pytest.mark.parametrize(("path", "method"), sorted(OPERATIONS))
def test_api_conforms_to_its_schema(wsgi_app, fuzz_seed, path, method):
    operation = schemathesis.openapi.from_wsgi("/api/schema/", wsgi_app)[path][method.upper()]

    @given(case=operation.as_strategy())
    @fuzzing(max_examples=30, fuzz_seed=fuzz_seed)
    def check(case):
        if "{id}" in path:  # aim at a real session; random ids are 404s tested elsewhere
            case.path_parameters = {
                **(case.path_parameters or {}),
                "id": str(live_session(wsgi_app.scope).pk),
            }
        assert_codes_documented(
            case.call_and_validate(headers={"Authorization": AUTH}, checks=CHECKS)
        )

    check()


def reference_cases(scope: str) -> list[tuple[str, str, dict]]:
    """Requests that reach the success paths of the reference endpoints (random bodies rarely
    name a real session): ``(path, method, case keyword arguments)``."""
    current = live_session(scope)
    other = live_session(scope)
    ref = [{"session_id": str(other.pk), "label": "other"}]
    ids = {"id": str(current.pk)}
    messages = "/api/cortex/sessions/{id}/messages/"
    prepare = "/api/cortex/sessions/{id}/references/prepare/"
    return [
        (
            "/api/cortex/sessions/{id}/reference-candidates/",
            "GET",
            {"path_parameters": ids, "query": {"q": "live", "limit": 5}},
        ),
        (prepare, "POST", {"path_parameters": ids, "body": {"content": "x", "references": ref}}),
        (
            prepare,
            "POST",
            {
                "path_parameters": ids,
                "body": {"content": "x", "references": [{"session_id": str(uuid.uuid4())}]},
            },
        ),
        (
            messages,
            "POST",
            {
                "path_parameters": ids,
                "body": {
                    "role": "user",
                    "content": "x",
                    "resolve_references": True,
                    "references": ref,
                },
            },
        ),
        (
            messages,
            "POST",
            {
                "path_parameters": ids,
                "body": {"role": "tool", "content": "x", "resolve_references": True},
            },
        ),
    ]


def test_reference_successes_and_errors_conform_to_the_schema(wsgi_app):
    schema = schemathesis.openapi.from_wsgi("/api/schema/", wsgi_app)
    statuses = []
    for path, method, kwargs in reference_cases(wsgi_app.scope):
        case = schema[path][method].Case(media_type="application/json", **kwargs)
        response = case.call_and_validate(headers={"Authorization": AUTH}, checks=CHECKS)
        assert_codes_documented(response)
        statuses.append(response.status_code)
    assert statuses == [200, 200, 404, 201, 400]


# -- every check, positive and negative (docs/design.md §12.4) -------------------------------------

#: Every check that applies to a single request and response, positive-data acceptance and
#: negative-data rejection included.
ALL_CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    positive_data_acceptance,
    negative_data_rejection,
    missing_required_header,
    unsupported_method,
]


#: Body fields of arbitrary nested JSON: session ``metadata`` (in every body that has it, the
#: merge patch's included) and message ``content`` blocks. The server refuses a NUL anywhere
#: in them — in a nested string or an object key (`nul_character`; PostgreSQL cannot store it)
#: — nesting deeper than ``content.MAX_JSON_DEPTH`` (`invalid_metadata`,
#: `invalid_content`; MariaDB cannot store it), and an object inside them with more keys than
#: ``MAX_JSON_KEYS`` (`too_many_keys`; the top-level metadata object's bound is stated,
#: ``maxProperties``). OpenAPI 3.0 has no ``propertyNames`` and these schemas no recursion, so
#: the schema cannot state these rules: a stated gap of docs/design.md §12.4.
FREE_JSON_FIELDS = ("metadata", "content")

#: The last seq of a :func:`live_session`.
LIVE_LAST_SEQ = 2


def stated_refusal(path: str, case) -> set[str]:
    """The codes the server answers a schema-valid (positive) case with for a rule the schema
    cannot state; empty when the case breaks none of them.

    - NUL or too deep inside :data:`FREE_JSON_FIELDS` (checked with the server's own rule,
      ``content.check_json_value``);
    - the parameter rules of :func:`_parameter_refusals` (the scope header against the scope
      parameter, the ``metadata`` filter's free JSON);
    - a fork point past the session's last seq (`invalid_up_to_seq`): the schema gives the
      bounds of every session, not of this one (docs/design.md §11.1);
    - references on a message without ``resolve_references: true``, or on one that is not
      the user's (`references_not_allowed`), and more distinct referenced sessions than
      ``MAX_REFERENCES`` (`SESSION_REFERENCE_TOO_MANY`; duplicates count once): rules across
      fields and items (docs/design.md §8.3, §8.8).

    Such a case is still sent and every other check applied; it must be a 400 with one of
    these codes, so the gap is tested case by case instead of excusing whole operations.
    """
    codes = _parameter_refusals(case)
    body = case.body if isinstance(case.body, dict | list) else None
    for item in body if isinstance(body, list) else [body]:
        if not isinstance(item, dict):
            continue
        for name in FREE_JSON_FIELDS:
            if name in item:
                try:
                    check_json_value(item[name], field=name)
                except InvalidInput as exc:
                    codes.add(exc.code)
        up_to_seq = item.get("up_to_seq") if path.endswith("/fork/") else None
        if isinstance(up_to_seq, int) and up_to_seq > LIVE_LAST_SEQ:
            codes.add("invalid_up_to_seq")
        codes |= _reference_refusals(path, item)
    return codes


def _scope_clash(case) -> set[str]:
    """``{"invalid_scope"}`` when the ``X-Cortex-Scope`` header and the ``scope`` parameter
    differ, a rule no schema can state."""
    header = (case.headers or {}).get("X-Cortex-Scope")
    query = case.query if isinstance(case.query, dict) else {}
    if header is not None and "scope" in query and header != query["scope"]:
        return {"invalid_scope"}
    return set()


def _parameter_refusals(case) -> set[str]:
    """The rules of :func:`stated_refusal` for the parameters: an ``X-Cortex-Scope`` header and
    a ``scope`` parameter that differ (`invalid_scope`, stated in each 400's description), and
    a ``metadata`` filter object the server's own rules refuse (``check_metadata_filter``:
    a NUL or nesting inside it; ``filter_by_metadata``: a key this database's JSON paths cannot
    name), which its schema — any object of at most 10 keys — cannot state."""
    codes = _scope_clash(case)
    query = case.query or {}
    if "metadata" in query:
        value = query["metadata"]
        try:
            checked = check_metadata_filter(json.loads(value) if isinstance(value, str) else value)
            filter_by_metadata(Session.objects.all(), checked)
        except InvalidInput as exc:
            codes.add(exc.code)
    return codes


def _reference_refusals(path: str, item: dict) -> set[str]:
    """The reference rules of :func:`stated_refusal` for one message or prepare body."""
    codes: set[str] = set()
    if path.endswith("/messages/"):
        resolving = item.get("resolve_references") is True
        if "references" in item and not resolving:
            codes.add("references_not_allowed")
        if resolving and (item.get("role") != "user" or item.get("source", "user") != "user"):
            codes.add("references_not_allowed")
        if not resolving:
            return codes
    ids = set()
    for reference in item.get("references") or []:
        if isinstance(reference, dict) and isinstance(reference.get("session_id"), str):
            try:
                ids.add(str(uuid.UUID(reference["session_id"])))
            except ValueError:
                ids.add(reference["session_id"])
    if len(ids) > app_settings.MAX_REFERENCES:
        codes.add("SESSION_REFERENCE_TOO_MANY")
    return codes


@pytest.mark.parametrize(
    ("path", "method", "mode"),
    [
        (path, method, mode)
        for path, method in sorted(OPERATIONS)
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    ],
)
def test_schema_and_server_agree_under_every_check(wsgi_app, fuzz_seed, path, method, mode):
    """Schema-valid requests are accepted (2xx, or 403/404 for a scope or id the caller may
    not use) and schema-invalid ones refused with a 4xx, every answer as documented."""
    operation = schemathesis.openapi.from_wsgi("/api/schema/", wsgi_app)[path][method.upper()]

    @given(case=operation.as_strategy(generation_mode=mode))
    @fuzzing(max_examples=25, fuzz_seed=fuzz_seed)
    def check(case):
        if "{id}" in path and mode is GenerationMode.POSITIVE:
            case.path_parameters = {
                **(case.path_parameters or {}),
                "id": str(live_session(wsgi_app.scope).pk),
            }
        if case.query and "cursor" in case.query and mode is GenerationMode.POSITIVE:
            # A cursor is an opaque token taken from a page's `next` link, never made up, and
            # it excludes `offset`: neither can a schema state.
            del case.query["cursor"]
        if case.headers and "Idempotency-Key" in case.headers and mode is GenerationMode.POSITIVE:
            # A key reused with another body is 422 by design; each example is a new request.
            case.headers["Idempotency-Key"] = uuid.uuid4().hex
        refusal = stated_refusal(path, case) if mode is GenerationMode.POSITIVE else set()
        # A negative case may come out schema-valid (only a free string such as the optional
        # X-Cortex-Consistency-Token was drawn "invalid"); the scope rule still refuses it.
        clash = mode is GenerationMode.NEGATIVE and "invalid_scope" in _scope_clash(case)
        response = case.call_and_validate(
            headers={"Authorization": AUTH},
            checks=ALL_CHECKS,
            excluded_checks=[positive_data_acceptance] if refusal or clash else None,
        )
        assert_codes_documented(response)
        if refusal and response.status_code not in (403, 404):  # a scope it may not use
            assert response.status_code == 400, (refusal, response.status_code)
            assert response.json()["code"] in refusal, (refusal, response.json())

    check()
