"""README's "Install into a host", followed to the letter in a fresh ``startproject`` host.

The host is built from exactly the README's snippets (tests/servers.py reads them from README.md),
migrated and served by ``runserver`` in a subprocess; the API, the schema, Swagger UI (from the
installed sidecar, no CDN) and the admin must all work there (docs/design.md §1, §7.3).

With ``CORTEX_WHEEL`` set to a built wheel (``python -m build``; ``.ci/run`` sets it), the host runs
in a fresh virtual environment into which only that wheel was installed, with its dependencies, so
what is tested is what a user would install; without it, in this test run's environment.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from tests.servers import (
    ROOT,
    Browser,
    Server,
    build_host_project,
    clean_env,
    readme_snippets,
    run,
    wheel_python,
)

PASSWORD = "host-pass-1"


@pytest.fixture(scope="module")
def python(tmp_path_factory):
    """The host's interpreter: a fresh environment's with ``$CORTEX_WHEEL`` installed, or
    this one's when it is unset."""
    wheel = os.environ.get("CORTEX_WHEEL")
    if not wheel:
        return sys.executable
    return wheel_python(Path(wheel).resolve(), tmp_path_factory.mktemp("venv") / "venv")


@pytest.fixture(scope="module")
def host(tmp_path_factory, python):
    """``(project directory, environment, interpreter)`` of a migrated host with a superuser
    ``admin``."""
    directory = build_host_project(tmp_path_factory.mktemp("host"), python)
    env = clean_env(DJANGO_SUPERUSER_PASSWORD=PASSWORD)
    manage = [python, "manage.py"]
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
    return directory, env, python


@pytest.fixture(scope="module")
def server(host):
    directory, env, python = host
    with Server(directory, env, python=python) as running:
        yield running


def test_the_host_imports_the_app_from_the_wheel_when_one_is_given(host):
    """With ``CORTEX_WHEEL``, ``cortex_sessions`` comes from the wheel's install, not from
    this checkout; without it, from this test run's environment."""
    directory, env, python = host
    origin = run(
        [python, "-c", "import cortex_sessions; print(cortex_sessions.__file__)"], directory, env
    ).strip()

    if os.environ.get("CORTEX_WHEEL"):
        assert "site-packages" in origin
        assert not Path(origin).resolve().is_relative_to(ROOT)
    else:
        assert python == sys.executable


def test_readme_has_the_settings_and_urls_a_host_needs():
    snippets = readme_snippets()

    assert '"DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema"' in snippets["settings.py"]
    assert '"drf_spectacular_sidecar"' in snippets["settings.py"]
    assert '"cortex_sessions.middleware.NulCredentialsMiddleware"' in snippets["settings.py"]
    assert 'include("cortex_sessions.api.urls")' in snippets["urls.py"]
    assert "SpectacularAPIView" in snippets["urls.py"]
    assert "SpectacularSwaggerView" in snippets["urls.py"]
    assert 'path("api/auth/", include("rest_framework.urls"))' in snippets["urls.py"]


def test_check_passes_and_spectacular_writes_a_valid_schema(host):
    directory, env, python = host
    run([python, "manage.py", "check", "--fail-level", "WARNING"], directory, env)

    schema = run(
        [python, "manage.py", "spectacular", "--validate", "--fail-on-warn"],
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


def test_the_api_log_in_route_gives_a_cookie_the_api_takes(server):
    """README's ``api/auth/`` route: DRF's log-in page, whose session cookie the API (and so
    Swagger UI's "Try it out") authenticates with."""
    client = Browser(server.base)

    status, url, _page = client.form_login("/api/auth/login/?next=/api/docs/", "admin", PASSWORD)
    assert status == 200
    assert url.endswith("/api/docs/")
    status, listing = client.json("/api/cortex/sessions/")

    assert status == 200, listing
    assert "count" in listing


def test_the_schema_is_served(server):
    status, _url, body = Browser(server.base).request("/api/schema/")

    assert status == 200
    assert "/api/cortex/sessions/resolve/:" in body


def test_swagger_ui_comes_from_the_installed_sidecar_not_a_cdn(server):
    client = Browser(server.base)
    status, _url, page = client.request("/api/docs/")

    assert status == 200
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in page
    # a CDN's host, not the three letters (the page's random tokens may hold them)
    assert not re.search(r"cdn\.|jsdelivr|unpkg", page, re.IGNORECASE)
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
