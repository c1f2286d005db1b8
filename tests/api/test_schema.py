"""The OpenAPI schema: valid, complete, and true to the API (DESIGN §7.3).

The schemathesis run generates requests from the schema and sends them to the example
project's WSGI application in-process (authenticated with HTTP Basic as an org member),
checking that no response is a 5xx and that every response matches the schema.
"""

from __future__ import annotations

import base64

import pytest
import schemathesis
import yaml
from django.core import signals
from django.core.handlers.wsgi import WSGIHandler
from django.core.management import call_command
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from cortex_sessions import services
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
    assert {"agent_id", "exact", "default_only", "search"} <= count_params
    for path, method in OPERATIONS:
        responses = paths[path][method]["responses"]
        assert {"400", "401", "403"} <= set(responses), (path, method)
        if "{id}" in path:
            assert "404" in responses, (path, method)
        error_schema = responses["403"]["content"]["application/json"]["schema"]
        assert error_schema == {"$ref": "#/components/schemas/Error"}
    assert "409" in paths["/api/cortex/sessions/{id}/make-default/"]["post"]["responses"]
    assert "413" in paths["/api/cortex/sessions/{id}/messages/"]["post"]["responses"]


def test_example_project_serves_the_schema_and_swagger_ui(client, settings):
    settings.ROOT_URLCONF = "example_project.urls"
    assert client.get("/api/schema/").status_code == 200
    assert client.get("/api/docs/").status_code == 200


# -- schemathesis ---------------------------------------------------------------------------------

USERNAME, PASSWORD = "fuzzer", "fuzz-password"
AUTH = "Basic " + base64.b64encode(f"{USERNAME}:{PASSWORD}".encode()).decode()


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


@pytest.mark.parametrize(("path", "method"), sorted(OPERATIONS))
def test_api_conforms_to_its_schema(wsgi_app, path, method):
    operation = schemathesis.openapi.from_wsgi("/api/schema/", wsgi_app)[path][method.upper()]

    @given(case=operation.as_strategy())
    @settings(
        max_examples=30,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
        database=None,
    )
    def check(case):
        if "{id}" in path:  # aim at a real session; random ids are 404s tested elsewhere
            case.path_parameters = {"id": str(live_session(wsgi_app.scope).pk)}
        case.call_and_validate(headers={"Authorization": AUTH}, checks=CHECKS)

    check()
