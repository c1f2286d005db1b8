"""A NUL byte in credentials: a coded refusal, never a 500 and never a log-in (docs/design.md
§7.3).

Django's ModelBackend and session store hand a username or session key to the database as they
are: PostgreSQL refuses a NUL (``DataError``, an HTML 500 on every URL), and MariaDB's
``utf8mb4_unicode_ci`` ignores it (``'alice\\0' = 'alice'``). The API refuses such a request in
its authentication step (401/403 ``authentication_failed``); for the admin and the host's own
views, ``cortex_sessions.middleware.NulCredentialsMiddleware`` drops the credential before
Django's middleware reads it.
"""

from __future__ import annotations

import base64
import importlib
import uuid

import pytest
from django.conf import settings as django_settings
from django.contrib.sessions.backends.db import SessionStore
from django.http import HttpResponse
from django.test import RequestFactory
from rest_framework.authentication import BasicAuthentication, SessionAuthentication
from rest_framework.test import APIClient

from cortex_sessions.api.views import SessionViewSet
from cortex_sessions.middleware import NulCredentialsMiddleware, carries_nul_credentials
from tests.api.conftest import BASE

pytestmark = pytest.mark.django_db

MIDDLEWARE = "cortex_sessions.middleware.NulCredentialsMiddleware"
SESSION_MIDDLEWARE = "django.contrib.sessions.middleware.SessionMiddleware"
CREDENTIALS = [b"ali\x00ce:pw", b"alice\x00:pw", b"\x00alice:pw", b"alice:p\x00w", b"alice:pw\x00"]


def basic(raw: bytes) -> str:
    return "Basic " + base64.b64encode(raw).decode()


def cookie(value: str) -> str:
    """A ``Cookie`` header with ``value`` as the session cookie, quoted as a browser may (``\\000``
    is an octal escape Django's cookie parser reads as NUL)."""
    return f'{django_settings.SESSION_COOKIE_NAME}="{value}"'


@pytest.fixture
def alice_with_password(make_user):
    """alice, password ``pw``, a member of acme (so a log-in as her would answer 200)."""
    return make_user("alice")


@pytest.fixture
def alice_session_key(alice_with_password):
    """The key of a real, logged-in session of alice's."""
    client = APIClient()
    client.force_login(alice_with_password)
    return client.cookies[django_settings.SESSION_COOKIE_NAME].value


@pytest.fixture
def with_middleware(settings):
    """The test project's middleware with ``NulCredentialsMiddleware`` before the session's."""
    middleware = list(settings.MIDDLEWARE)
    middleware.insert(middleware.index(SESSION_MIDDLEWARE), MIDDLEWARE)
    settings.MIDDLEWARE = middleware


def assert_authentication_failed(response) -> None:
    assert response.status_code in (401, 403), (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("application/json")
    assert response.json()["code"] == "authentication_failed"


# -- the API ------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", CREDENTIALS)
def test_nul_in_basic_credentials_is_authentication_failed(alice_with_password, raw):
    # On MariaDB ``alice\0`` would otherwise be alice; on PostgreSQL it was an HTML 500.
    response = APIClient().get(BASE, HTTP_AUTHORIZATION=basic(raw))

    assert_authentication_failed(response)


@pytest.mark.parametrize("raw", CREDENTIALS[:2])
def test_nul_in_basic_credentials_is_a_401_when_basic_comes_first(
    alice_with_password, monkeypatch, raw
):
    # DRF reads DEFAULT_AUTHENTICATION_CLASSES once, into the view class.
    monkeypatch.setattr(
        SessionViewSet, "authentication_classes", [BasicAuthentication, SessionAuthentication]
    )

    response = APIClient().get(BASE, HTTP_AUTHORIZATION=basic(raw))

    assert response.status_code == 401 and response["WWW-Authenticate"].startswith("Basic")
    assert response.json()["code"] == "authentication_failed"


def test_nul_in_the_raw_authorization_header_is_authentication_failed(alice_with_password):
    response = APIClient().get(BASE, HTTP_AUTHORIZATION="Basic YWxpY2U6cHc=\x00")

    assert_authentication_failed(response)


@pytest.mark.parametrize(
    ("method", "path"),
    # Declared methods only: an undeclared one is 405 before authentication runs.
    [("get", BASE), ("post", BASE), ("delete", f"{BASE}{uuid.uuid4()}/")],
)
def test_nul_in_the_session_cookie_is_authentication_failed(alice_with_password, method, path):
    response = getattr(APIClient(), method)(path, HTTP_COOKIE=cookie("aaaaaaaa\\000bbbb"))

    assert_authentication_failed(response)


def test_a_real_session_key_with_a_nul_logs_no_one_in(alice_session_key):
    logged_in = APIClient().get(BASE, HTTP_COOKIE=cookie(alice_session_key))
    response = APIClient().get(BASE, HTTP_COOKIE=cookie(alice_session_key + "\\000"))

    assert logged_in.status_code == 200
    assert_authentication_failed(response)


def test_a_nul_credential_is_refused_even_when_another_one_is_good(alice_with_password):
    # One request, two credentials, one of them hostile: refused, whichever is tried first.
    response = APIClient().get(
        BASE,
        HTTP_AUTHORIZATION=basic(b"alice:pw"),
        HTTP_COOKIE=cookie("aaaaaaaa\\000bbbb"),
    )

    assert_authentication_failed(response)


def test_the_api_behind_the_middleware_still_says_authentication_failed(
    alice_with_password, with_middleware
):
    by_header = APIClient().get(BASE, HTTP_AUTHORIZATION=basic(b"alice\x00:pw"))
    by_cookie = APIClient().get(BASE, HTTP_COOKIE=cookie("aaaaaaaa\\000bbbb"))

    assert_authentication_failed(by_header)
    assert_authentication_failed(by_cookie)


def test_credentials_without_nul_are_untouched(alice_with_password, alice_session_key):
    assert APIClient().get(BASE, HTTP_AUTHORIZATION=basic(b"alice:pw")).status_code == 200
    assert APIClient().get(BASE, HTTP_COOKIE=cookie(alice_session_key)).status_code == 200


# -- the admin and other host views, through the middleware ------------------------------------


@pytest.fixture
def admin_session_key(django_user_model):
    admin = django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    client = APIClient()
    client.force_login(admin)
    return client.cookies[django_settings.SESSION_COOKIE_NAME].value


@pytest.mark.parametrize("suffix", ["", "\\000", "aaaaaaaa\\000bbbb"])
def test_the_admin_with_the_middleware_sends_a_nul_cookie_to_log_in(
    admin_session_key, with_middleware, suffix
):
    value = suffix if suffix.startswith("a") else admin_session_key + suffix

    response = APIClient().get("/admin/", HTTP_COOKIE=cookie(value))

    if suffix == "":  # the real key: the admin opens
        assert response.status_code == 200
    else:
        assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_the_admin_with_the_middleware_ignores_nul_basic_credentials(
    admin_session_key, with_middleware
):
    response = APIClient().get(
        "/admin/",
        HTTP_AUTHORIZATION=basic(b"root\x00:pw"),
        HTTP_COOKIE=cookie(admin_session_key),
    )

    assert response.status_code == 200  # the clean session cookie still logs the admin in


def test_the_middleware_drops_only_the_credentials_holding_a_nul():
    seen = {}

    def view(request):
        seen["cookies"] = dict(request.COOKIES)
        seen["authorization"] = request.META.get("HTTP_AUTHORIZATION")
        return HttpResponse()

    middleware = NulCredentialsMiddleware(view)
    name = django_settings.SESSION_COOKIE_NAME
    request = RequestFactory().get(
        "/", HTTP_COOKIE=f'{name}="a\\000b"; csrftoken=t', HTTP_AUTHORIZATION=basic(b"a:b")
    )
    assert carries_nul_credentials(request)
    middleware(request)
    assert seen == {"cookies": {"csrftoken": "t"}, "authorization": basic(b"a:b")}
    assert carries_nul_credentials(request)  # what it dropped stays known to the API

    clean = RequestFactory().get("/", HTTP_COOKIE=f"{name}=abc", HTTP_AUTHORIZATION=basic(b"a:b"))
    assert not carries_nul_credentials(clean)
    middleware(clean)
    assert seen == {"cookies": {name: "abc"}, "authorization": basic(b"a:b")}


def test_the_middleware_goes_before_session_middleware_in_the_example_project():
    example = importlib.import_module("example_project.settings")

    middleware = list(example.MIDDLEWARE)

    assert middleware.index(MIDDLEWARE) < middleware.index(SESSION_MIDDLEWARE)


def test_a_session_store_never_sees_the_dropped_key(with_middleware, monkeypatch):
    loaded = []
    original = SessionStore.load

    def load(self):
        loaded.append(self.session_key)
        return original(self)

    monkeypatch.setattr(SessionStore, "load", load)

    APIClient().get("/admin/", HTTP_COOKIE=cookie("aaaaaaaa\\000bbbb"))

    assert not any("\x00" in (key or "") for key in loaded)
