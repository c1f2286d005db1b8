"""The ADK integration's admin: read-only pages that never answer 500 (docs/design.md §13.3)."""

from __future__ import annotations

import pytest

pytest.importorskip("google.adk")

from asgiref.sync import async_to_sync

from cortex_sessions.integrations.adk import CortexSessionService
from cortex_sessions.integrations.adk.models import AdkSession

pytestmark = pytest.mark.django_db


@pytest.fixture
def adk_session():
    service = CortexSessionService()
    async_to_sync(service.create_session)(
        app_name="app", user_id="u", session_id="chat-1", state={"user:name": "Ada", "k": 1}
    )
    return AdkSession.objects.get(adk_id="chat-1")


@pytest.mark.parametrize(
    "url",
    [
        "/admin/cortex_adk/adksession/",
        "/admin/cortex_adk/adksession/?q=chat",
        "/admin/cortex_adk/adkappstate/",
        "/admin/cortex_adk/adkuserstate/?q=Ada",
        "/admin/cortex_adk/adkuserstate/?q=user%3Du",
        "/admin/cortex_adk/adkappstate/?q=org",
    ],
)
def test_changelists_render(admin_client, adk_session, url):
    assert admin_client.get(url).status_code == 200


def test_a_nul_in_the_search_is_an_error_redirect_not_a_500(admin_client, adk_session):
    assert admin_client.get("/admin/cortex_adk/adksession/?q=a%00b").status_code == 302


def test_an_adk_session_links_to_its_cortex_session_and_cannot_be_edited(admin_client, adk_session):
    page = admin_client.get(f"/admin/cortex_adk/adksession/{adk_session.pk}/change/")
    body = page.content.decode()
    assert page.status_code == 200
    assert f"/admin/cortex_sessions/session/{adk_session.session_id}/change/" in body
    assert 'name="_save"' not in body
    post = admin_client.post(f"/admin/cortex_adk/adksession/{adk_session.pk}/change/", {})
    assert post.status_code == 403
    assert admin_client.get("/admin/cortex_adk/adksession/add/").status_code == 403


def test_deleting_the_cortex_session_in_its_admin_takes_the_adk_row_along(
    admin_client, adk_session
):
    url = f"/admin/cortex_sessions/session/{adk_session.session_id}/delete/"
    response = admin_client.post(url, {"post": "yes"})
    assert response.status_code == 302
    assert not AdkSession.objects.filter(pk=adk_session.pk).exists()
    service = CortexSessionService()
    assert (
        async_to_sync(service.get_session)(app_name="app", user_id="u", session_id="chat-1") is None
    )
