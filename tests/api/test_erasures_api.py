"""``POST /erasures/`` and ``GET /erasures/{id}/`` (docs/design.md §18.2)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from cortex_sessions.models import Erasure, Session

from ..erasure_data import populate, snapshot

pytestmark = pytest.mark.django_db

URL = "/api/cortex/erasures/"


@pytest.fixture
def operator(make_user):
    """A host operator: no org, the permission cortex_sessions.erase_scope."""
    user = make_user("ops", org=None)
    user.user_permissions.add(
        Permission.objects.get(content_type__app_label="cortex_sessions", codename="erase_scope")
    )
    return user


def test_an_operator_erases_a_scope_and_reads_the_record(client_for, operator):
    populate(sessions_per_user=1)
    api = client_for(operator)
    response = api.post(URL, {"scope": "org=acme"}, format="json")
    assert response.status_code == 202, response.json()
    body = response.json()
    assert body["status"] == "done"
    assert body["scope"] == "org=acme"
    assert body["counts"]["cortex_sessions.Session"] == 6
    assert body["skipped_held"] == 0
    assert body["requested_by"] == str(operator.pk)
    assert set(body) == {
        "id",
        "scope",
        "status",
        "counts",
        "skipped_held",
        "requested_by",
        "created_at",
        "finished_at",
    }
    assert response["Location"] == f"{URL}{body['id']}/"
    assert not Session.objects.within("org=acme").exists()
    assert Session.objects.within("org=globex").count() == 6

    detail = api.get(response["Location"])
    assert detail.status_code == 200
    assert detail.json() == body


def test_an_org_admin_of_the_scope_without_the_permission_is_refused(client_for, make_user):
    populate(sessions_per_user=1)
    admin = make_user("boss", org="acme", admin=True)
    before = snapshot()
    response = client_for(admin).post(URL, {"scope": "org=acme"}, format="json")
    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"
    assert snapshot() == before
    assert not Erasure.objects.exists()


def test_anonymous_callers_are_refused(client_for):
    response = client_for(None).post(URL, {"scope": "org=acme"}, format="json")
    assert response.status_code in (401, 403)
    assert response.json()["code"] == "not_authenticated"


def test_reading_a_record_needs_the_permission_too(client_for, make_user):
    record = Erasure.objects.create(scope="org=acme", status="done")
    admin = make_user("boss", org="acme", admin=True)
    response = client_for(admin).get(f"{URL}{record.pk}/")
    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"


@pytest.mark.parametrize(
    ("body", "field_code"),
    [
        ({"scope": ""}, "invalid_scope"),
        ({"scope": "org"}, "invalid_scope"),
        ({"scope": "org=acme/"}, "invalid_scope"),
        ({"scope": 5}, "invalid_scope"),
        ({"scope": None}, "invalid_scope"),
        ({}, "required"),
        ({"scope": "org=acme", "everything": True}, "unknown_field"),
    ],
)
def test_a_bad_scope_is_400_and_nothing_is_deleted(client_for, operator, body, field_code):
    populate(sessions_per_user=1)
    before = snapshot()
    response = client_for(operator).post(URL, body, format="json")
    assert response.status_code == 400, response.json()
    errors = response.json()["errors"]
    assert field_code in {item["code"] for items in errors.values() for item in items}
    assert snapshot() == before
    assert not Erasure.objects.exists()


def test_a_post_for_a_scope_with_an_unfinished_erasure_resumes_it(client_for, operator):
    populate(sessions_per_user=1)
    unfinished = Erasure.objects.create(scope="org=acme", status="running", requested_by="x")
    response = client_for(operator).post(URL, {"scope": "org=acme"}, format="json")
    assert response.status_code == 202
    assert response.json()["id"] == str(unfinished.pk)
    assert Erasure.objects.get().status == "done"


@pytest.mark.parametrize("erasure_id", ["0190f5a0-0000-7000-8000-000000000000", "nope"])
def test_an_unknown_erasure_is_404(client_for, operator, erasure_id):
    response = client_for(operator).get(f"{URL}{erasure_id}/")
    assert response.status_code == 404
    assert response.json()["code"] == "erasure_not_found"


def test_erasures_take_no_scope_parameter(client_for, operator):
    record = Erasure.objects.create(scope="org=acme", status="done")
    response = client_for(operator).get(f"{URL}{record.pk}/?scope=org=acme")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_filter"


@pytest.mark.parametrize("method", ["get", "put", "patch", "delete"])
def test_erasure_records_cannot_be_listed_changed_or_deleted(client_for, operator, method):
    record = Erasure.objects.create(scope="org=acme", status="done")
    url = URL if method == "get" else f"{URL}{record.pk}/"
    response = getattr(client_for(operator), method)(url, {}, format="json")
    assert response.status_code == 405
    assert Erasure.objects.get() == record


def test_the_erasure_views_are_exempt_from_atomic_requests():
    """Each batch commits on its own even when the host sets ``ATOMIC_REQUESTS``."""
    from django.db import DEFAULT_DB_ALIAS
    from django.urls import resolve

    for path in (URL, f"{URL}0190f5a0-0000-7000-8000-000000000000/"):
        view = resolve(path).func
        assert DEFAULT_DB_ALIAS in getattr(view, "_non_atomic_requests", set())
