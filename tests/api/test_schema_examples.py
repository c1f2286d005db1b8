"""The OpenAPI schema's examples are values the server accepts (docs/design.md §12.4), so Swagger
UI's "Try it out" works as shown: every patterned string has an example matching its pattern,
every request body example is valid for its body's schema, and the requests Swagger UI builds
from them, sent as the demo's bob (``org=acme/user=2``), answer 2xx."""

from __future__ import annotations

import json
import re
import uuid
from urllib.parse import urlencode

import jsonschema
import pytest
import yaml
from django.core.management import call_command
from rest_framework.test import APIClient

from cortex_sessions.api.examples import example_for, with_pattern_examples
from cortex_sessions.api.serializers import NO_NUL_PATTERN, SCOPE_PATTERN
from example_project.tenancy.models import Membership

pytestmark = pytest.mark.django_db

#: Operations whose request body is described, each with at least one example.
BODY_OPERATIONS = {
    ("/api/cortex/sessions/", "post"),
    ("/api/cortex/sessions/resolve/", "post"),
    ("/api/cortex/sessions/{id}/", "put"),
    ("/api/cortex/sessions/{id}/", "patch"),
    ("/api/cortex/sessions/{id}/fork/", "post"),
    ("/api/cortex/sessions/{id}/messages/", "post"),
    ("/api/cortex/sessions/{id}/references/prepare/", "post"),
}


@pytest.fixture
def schema_document(tmp_path, settings):
    """The example project's schema, as ``spectacular --validate --fail-on-warn`` writes it."""
    settings.ROOT_URLCONF = "example_project.urls"
    path = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(path))
    return yaml.safe_load(path.read_text())


def patterned(node, where=""):
    """``(where, schema)`` of every schema object in ``node`` that has a ``pattern``."""
    if isinstance(node, dict):
        if isinstance(node.get("pattern"), str):
            yield where, node
        for key, value in node.items():
            yield from patterned(value, f"{where}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            name = value.get("name", index) if isinstance(value, dict) else index
            yield from patterned(value, f"{where}/{name}")


def test_every_patterned_string_has_an_example_matching_its_pattern(schema_document):
    """A tester found no example on any of 84 patterned fields and parameters, so Swagger UI
    filled them with strings drawn from the regular expressions."""
    found = list(patterned(schema_document))
    assert len(found) > 50  # headers, query parameters, body fields, nested blocks
    wrong = [
        (where, schema.get("example"))
        for where, schema in found
        if not isinstance(schema.get("example"), str)
        or not re.search(schema["pattern"], schema["example"])
    ]
    assert wrong == []


def test_examples_are_the_demo_users_values(schema_document):
    paths = schema_document["paths"]
    listing = paths["/api/cortex/sessions/"]["get"]["parameters"]
    (metadata,) = [p for p in listing if p["name"] == "metadata"]
    assert metadata["content"]["application/json"]["example"] == {}  # filters nothing
    resolve = paths["/api/cortex/sessions/resolve/"]["post"]
    by_name = {p["name"]: p["schema"] for p in resolve["parameters"]}
    assert by_name["X-Cortex-Scope"]["example"] == by_name["scope"]["example"] == "org=acme/user=2"
    key = paths["/api/cortex/sessions/"]["post"]["parameters"]
    (idempotency,) = [p["schema"] for p in key if p["name"] == "Idempotency-Key"]
    assert str(uuid.UUID(idempotency["example"])) == idempotency["example"]
    schemas = schema_document["components"]["schemas"]
    assert schemas["Resolve"]["properties"]["agent_id"]["example"] == "coder"
    assert schemas["ReferenceSource"]["properties"]["form"]["example"] == "recall"
    assert schemas["ReferenceSource"]["properties"]["kind"]["example"] == "session-reference"


def request_examples(schema_document):
    """``(path, method, media type, body schema, example name, value)`` of every request
    body example."""
    for path, item in schema_document["paths"].items():
        for method, operation in item.items():
            content = operation.get("requestBody", {}).get("content", {})
            for media_type, media in content.items():
                for name, example in media.get("examples", {}).items():
                    yield path, method, media_type, media["schema"], name, example["value"]


def test_every_request_example_is_valid_for_its_body_schema(schema_document):
    components = {"components": schema_document["components"]}
    examples = list(request_examples(schema_document))
    assert {(path, method) for path, method, *_ in examples} == BODY_OPERATIONS
    for path, method, media_type, schema, name, value in examples:
        errors = list(jsonschema.Draft7Validator({**schema, **components}).iter_errors(value))
        assert errors == [], (path, method, media_type, name)


def test_resolve_example_names_no_session(schema_document):
    """Swagger's default resolve body carried ``session_id: "3fa85f64-…"``: a 404."""
    for *_, value in request_examples(schema_document):
        if isinstance(value, dict):
            assert "session_id" not in value


def test_example_for_keeps_to_the_pattern():
    assert example_for("title", NO_NUL_PATTERN) == "Why does login fail?"
    assert example_for("anything", SCOPE_PATTERN) == "org=acme/user=2"
    assert example_for("agent_id", SCOPE_PATTERN) == "org=acme/user=2"  # the name's is refused
    assert example_for(None, r"^session\-reference$") == "session-reference"
    assert example_for(None, "^[0-9]{3}$") is None


def test_with_pattern_examples_copies_and_skips_what_it_cannot_match():
    title = {"type": "string", "pattern": NO_NUL_PATTERN}
    digits = {"type": "string", "pattern": "^[0-9]{3}$"}
    schema = {"type": "object", "properties": {"title": title, "code": digits}}
    described = with_pattern_examples(schema)
    assert described["properties"]["title"]["example"] == "Why does login fail?"
    assert "example" not in described["properties"]["code"]
    assert "example" not in title  # the given schema (often a module constant) is not modified
    assert with_pattern_examples(digits) is digits


# -- what Swagger UI sends ------------------------------------------------------------------------


@pytest.fixture
def bob(django_user_model, settings):
    """The demo's bob: a member of acme with user id 2, so scope ``org=acme/user=2``."""
    settings.ROOT_URLCONF = "example_project.urls"
    user = django_user_model.objects.create_user(pk=2, username="bob", password="demo")
    Membership.objects.create(user=user, org="acme")
    client = APIClient()
    client.force_authenticate(user)
    return client


def swagger_request(
    client, document, path, method, *, ids=(), example=0, headers=None, media_type=None
):
    """Send what Swagger UI's "Try it out" sends unchanged: every parameter with an example set
    to it, and the operation's ``example``-th request body example of ``media_type`` (default:
    the first media type, JSON)."""
    operation = document["paths"][path][method]
    query, sent_headers = {}, {}
    for parameter in operation.get("parameters", []):
        value = parameter.get("schema", {}).get("example")
        for media in parameter.get("content", {}).values():  # the metadata filter: {}
            value = json.dumps(media["example"])
        if value is None:
            continue
        if parameter["in"] == "query":
            query[parameter["name"]] = value
        elif parameter["in"] == "header":
            sent_headers[parameter["name"]] = value
    sent_headers.update(headers or {})
    url = path
    for name, value in zip(("{id}",), ids, strict=False):
        url = url.replace(name, str(value))
    kwargs = {}
    content = operation.get("requestBody", {}).get("content", {})
    if content:
        media_type = media_type or next(iter(content))
        value = list(content[media_type]["examples"].values())[example]["value"]
        kwargs = {"data": json.dumps(value), "content_type": media_type}
    if query:
        url = f"{url}?{urlencode(query)}"
    return client.generic(method.upper(), url, headers=sent_headers, **kwargs)


def test_swagger_try_it_out_requests_answer_2xx_for_the_demo_user(bob, schema_document):
    """As bob would in Swagger UI: resolve, append, create, fork, replace, patch, prepare, then
    list, count and read with every prefilled parameter — each a 2xx."""
    doc, base = schema_document, "/api/cortex/sessions/"
    resolved = swagger_request(bob, doc, f"{base}resolve/", "post")
    assert resolved.status_code == 201, resolved.json()
    assert resolved.json()["scope"] == "org=acme/user=2"
    session = resolved.json()["id"]
    assert swagger_request(bob, doc, f"{base}resolve/", "post").status_code == 200
    messages = f"{base}{{id}}/messages/"
    one = swagger_request(bob, doc, messages, "post", ids=[session])
    assert one.status_code == 201, one.json()
    # The prefilled Idempotency-Key under another body is 422 by design: a new key.
    listed = swagger_request(
        bob,
        doc,
        messages,
        "post",
        ids=[session],
        example=1,
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )
    assert listed.status_code == 201, listed.json()
    created = swagger_request(bob, doc, base, "post")
    assert created.status_code == 201, created.json()
    fork = swagger_request(bob, doc, f"{base}{{id}}/fork/", "post", ids=[session])
    assert fork.status_code == 201, fork.json()
    forked = fork.json()["id"]
    one_session = f"{base}{{id}}/"
    for method in ("put", "patch"):
        answer = swagger_request(bob, doc, one_session, method, ids=[forked])
        assert answer.status_code == 200, (method, answer.json())
    merged = swagger_request(
        bob, doc, one_session, "patch", ids=[forked], media_type="application/merge-patch+json"
    )
    assert merged.status_code == 200, merged.json()
    assert "ticket" not in merged.json()["metadata"]
    prepared = swagger_request(bob, doc, f"{base}{{id}}/references/prepare/", "post", ids=[session])
    assert prepared.status_code == 200, prepared.json()
    for path, ids in (
        (base, []),
        (f"{base}count/", []),
        (one_session, [forked]),
        (messages, [forked]),
        (f"{base}{{id}}/reference-candidates/", [session]),
    ):
        answer = swagger_request(bob, doc, path, "get", ids=ids)
        assert answer.status_code == 200, (path, answer.json())
    page = swagger_request(bob, doc, base, "get").json()
    assert forked in [row["id"] for row in page["results"]]  # coder, "login" in title and text
