"""An undeclared method is 405 before anything else is checked (docs/design.md §7.3):
it answered 400 ``invalid_scope`` (or 401/403) because the scope checks ran first."""

from __future__ import annotations

import uuid

import pytest
from rest_framework.test import APIClient

from tests.api.conftest import BASE

pytestmark = pytest.mark.django_db

SID = str(uuid.uuid4())

#: Every endpoint of the API with the methods it declares (HEAD follows GET; OPTIONS is DRF's).
ENDPOINTS = {
    BASE: {"GET", "POST"},
    f"{BASE}count/": {"GET"},
    f"{BASE}resolve/": {"POST"},
    f"{BASE}{SID}/": {"GET", "PUT", "PATCH", "DELETE"},
    f"{BASE}{SID}/make-default/": {"POST"},
    f"{BASE}{SID}/messages/": {"GET", "POST", "DELETE"},
    f"{BASE}{SID}/messages/pop/": {"POST"},
    f"{BASE}{SID}/messages/3/": {"DELETE"},
    f"{BASE}{SID}/fork/": {"POST"},
    f"{BASE}{SID}/archive/": {"POST"},
    f"{BASE}{SID}/unarchive/": {"POST"},
    f"{BASE}{SID}/reference-candidates/": {"GET"},
    f"{BASE}{SID}/references/prepare/": {"POST"},
}

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "TRACE", "HEAD", "FROBNICATE")

UNDECLARED = [
    (url, method)
    for url, declared in ENDPOINTS.items()
    for method in METHODS
    if method not in declared and not (method == "HEAD" and "GET" in declared)
]


def allowed(declared: set[str]) -> set[str]:
    return declared | {"OPTIONS"} | ({"HEAD"} if "GET" in declared else set())


def test_every_endpoint_is_tested_with_every_undeclared_method():
    assert len(UNDECLARED) == sum(
        len([m for m in METHODS if m not in allowed(declared)]) for declared in ENDPOINTS.values()
    )
    assert {url for url, _ in UNDECLARED} == set(ENDPOINTS)


@pytest.mark.parametrize(("url", "method"), UNDECLARED)
def test_an_undeclared_method_is_405_whatever_else_is_wrong(api, url, method):
    """An empty ``scope`` (400 ``invalid_scope`` on a declared method), a conflicting scope
    header and a body: the method is still what the answer names."""
    response = api.generic(
        method,
        f"{url}?scope=",
        data='{"x": 1}',
        content_type="application/json",
        HTTP_X_CORTEX_SCOPE="org=other",
    )
    assert response.status_code == 405
    assert set(response.headers["Allow"].replace(" ", "").split(",")) == allowed(ENDPOINTS[url])
    if method != "HEAD":  # a HEAD answer has no body
        assert response.headers["Content-Type"].startswith("application/json")
        assert response.json()["code"] == "method_not_allowed"


@pytest.mark.parametrize(("url", "method"), UNDECLARED[:: max(1, len(UNDECLARED) // 8)])
def test_an_undeclared_method_is_405_without_credentials_too(url, method):
    response = APIClient().generic(method, url)
    assert response.status_code == 405
    assert "Allow" in response.headers


def test_a_declared_method_still_checks_the_scope_first(api):
    response = api.get(f"{BASE}count/?scope=")
    assert (response.status_code, response.json()["code"]) == (400, "invalid_scope")
