"""Every status an operation answers is declared for it in the OpenAPI schema, with the
error code it answers (docs/design.md §7.3, §12.4): a generated client must not meet an
undeclared 409. Each case drives the operation into its conflict and checks the schema."""

from __future__ import annotations

import pytest
import yaml
from django.core.management import call_command

from cortex_sessions import services
from cortex_sessions.exceptions import DefaultConflict
from tests.api.conftest import BASE, session_url

pytestmark = pytest.mark.django_db

TEMPLATE = "/api/cortex/sessions/{id}/"

#: (method, path under the session, body, schema path) of every write an archived session
#: refuses with 409 session_archived (docs/design.md §11.2).
ARCHIVED_WRITES = [
    ("post", "messages/", {"role": "user", "content": "x"}, "messages/"),
    ("post", "messages/", [{"role": "user", "content": "x"}], "messages/"),
    (
        "post",
        "messages/",
        {"role": "user", "content": "x", "resolve_references": True},
        "messages/",
    ),
    ("delete", "messages/", None, "messages/"),
    ("delete", "messages/?after_seq=1", None, "messages/"),
    ("delete", "messages/1/", None, "messages/{seq}/"),
    ("post", "messages/pop/", None, "messages/pop/"),
    ("post", "make-default/", None, "make-default/"),
]


@pytest.fixture
def schema_paths(tmp_path, settings):
    settings.ROOT_URLCONF = "example_project.urls"
    path = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(path))
    return yaml.safe_load(path.read_text())["paths"]


def declared(schema_paths, path: str, method: str, status: int) -> str:
    """The description of ``status`` for the operation; fails when it is not declared."""
    responses = schema_paths[path][method]["responses"]
    assert str(status) in responses, (path, method, sorted(responses))
    return str(responses[str(status)]["description"])


@pytest.mark.parametrize(("method", "suffix", "body", "schema_suffix"), ARCHIVED_WRITES)
def test_every_write_refused_on_an_archived_session_declares_its_409(
    api, alice_scope, schema_paths, method, suffix, body, schema_suffix
):
    session = services.create_session(scope=alice_scope, agent_id="a")
    services.append_messages(
        scope=alice_scope, session_id=session.pk, messages=[{"role": "user", "content": "q"}]
    )
    services.archive_session(scope=alice_scope, session_id=session.pk)

    response = getattr(api, method)(session_url(session.pk, suffix), body, format="json")

    assert (response.status_code, response.json()["code"]) == (409, "session_archived")
    description = declared(schema_paths, TEMPLATE + schema_suffix, method, 409)
    assert "session_archived" in description
    assert "default_conflict" not in description or schema_suffix == "make-default/"


@pytest.mark.parametrize(
    ("service", "method", "url", "body", "schema_path"),
    [
        ("resolve_session", "post", BASE + "resolve/", {"agent_id": "a"}, BASE + "resolve/"),
        ("make_default", "post", "make-default/", None, TEMPLATE + "make-default/"),
    ],
)
def test_every_default_conflict_is_declared(
    api, alice_scope, schema_paths, monkeypatch, service, method, url, body, schema_path
):
    """A storm the retries do not outlast (docs/design.md §12.3) is a 409 the schema names."""
    session = services.create_session(scope=alice_scope, agent_id="a")

    def storm(**kwargs):
        raise DefaultConflict()

    monkeypatch.setattr(services, service, storm)
    target = url if url.startswith("/") else session_url(session.pk, url)
    response = getattr(api, method)(target, body, format="json")

    assert (response.status_code, response.json()["code"]) == (409, "default_conflict")
    assert "default_conflict" in declared(schema_paths, schema_path, method, 409)


def test_every_list_filter_is_described(schema_paths):
    for path in (BASE, BASE + "count/"):
        for parameter in schema_paths[path]["get"]["parameters"]:
            assert parameter.get("description"), (path, parameter["name"])
