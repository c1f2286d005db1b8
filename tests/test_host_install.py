"""README's "Install into a host", followed to the letter in a fresh ``startproject`` host.

The host is built from exactly the README's snippets (tests/servers.py reads them from README.md),
migrated and served by ``runserver`` in a subprocess; the API, the schema, Swagger UI (from the
installed sidecar, no CDN) and the admin must all work there (docs/design.md §1, §7.3).
"""

from __future__ import annotations

import sys

import pytest

from tests.servers import Browser, Server, build_host_project, clean_env, readme_snippets, run

PASSWORD = "host-pass-1"


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """``(project directory, environment)`` of a migrated host with a superuser ``admin``."""
    directory = build_host_project(tmp_path_factory.mktemp("host"))
    env = clean_env(DJANGO_SUPERUSER_PASSWORD=PASSWORD)
    manage = [sys.executable, "manage.py"]
    run([*manage, "migrate", "--noinput"], directory, env)
    run(
        [
            *manage,
            "createsuperuser",
            "--noinput",
            "--username",
            "admin",
            "--email",
            "a@example.com",
        ],
        directory,
        env,
    )
    return directory, env


@pytest.fixture(scope="module")
def server(host):
    directory, env = host
    with Server(directory, env) as running:
        yield running


def test_readme_has_the_settings_and_urls_a_host_needs():
    snippets = readme_snippets()

    assert '"DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema"' in snippets["settings.py"]
    assert '"drf_spectacular_sidecar"' in snippets["settings.py"]
    assert '"cortex_sessions.middleware.NulCredentialsMiddleware"' in snippets["settings.py"]
    assert 'include("cortex_sessions.api.urls")' in snippets["urls.py"]
    assert "SpectacularAPIView" in snippets["urls.py"]
    assert "SpectacularSwaggerView" in snippets["urls.py"]


def test_check_passes_and_spectacular_writes_a_valid_schema(host):
    directory, env = host
    run([sys.executable, "manage.py", "check", "--fail-level", "WARNING"], directory, env)

    schema = run(
        [sys.executable, "manage.py", "spectacular", "--validate", "--fail-on-warn"],
        directory,
        env,
    )

    assert schema.startswith("openapi: 3")
    assert "/api/cortex/sessions/{id}/messages/:" in schema


def test_the_api_serves_a_user_at_their_scope(server):
    client = Browser(server.base)
    admin = ("admin", PASSWORD)

    status, created = client.json(
        "/api/cortex/sessions/", {"agent_id": "coder", "title": "First"}, basic=admin
    )
    assert status == 201, created
    assert created["scope"] == "user=1"  # the default resolver: user=<pk>
    status, listing = client.json("/api/cortex/sessions/", basic=admin)
    assert status == 200
    assert listing["count"] == 1
    assert listing["results"][0]["title"] == "First"
    status, anonymous = client.json("/api/cortex/sessions/")
    assert status in (401, 403)
    assert anonymous["code"] in ("not_authenticated", "no_scope")


def test_the_schema_is_served(server):
    status, _url, body = Browser(server.base).request("/api/schema/")

    assert status == 200
    assert "/api/cortex/sessions/resolve/:" in body


def test_swagger_ui_comes_from_the_installed_sidecar_not_a_cdn(server):
    client = Browser(server.base)
    status, _url, page = client.request("/api/docs/")

    assert status == 200
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in page
    assert "cdn" not in page.lower()
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "swagger-ui-standalone-preset.js"):
        asset_status, _url, _body = client.request(
            f"/static/drf_spectacular_sidecar/swagger-ui-dist/{asset}"
        )
        assert asset_status == 200, asset


def test_the_admin_opens_and_lists_sessions(server):
    client = Browser(server.base)
    client.json("/api/cortex/sessions/", {"agent_id": "admin-check"}, basic=("admin", PASSWORD))

    status, url, _page = client.form_login("/admin/login/?next=/admin/", "admin", PASSWORD)
    assert status == 200
    assert url.endswith("/admin/")
    status, _url, page = client.request("/admin/cortex_sessions/session/")

    assert status == 200
    assert "admin-check" in page
