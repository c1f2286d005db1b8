"""The example project's front page: ``/`` of ``make demo`` lands somewhere useful."""

from __future__ import annotations

import pytest

from example_project.tenancy.management.commands.seed_demo import DEMO_USERS


@pytest.fixture
def demo_urls(settings):
    settings.ROOT_URLCONF = "example_project.urls"


def test_front_page_links_every_entry_point_and_names_the_demo_log_ins(client, demo_urls):
    response = client.get("/")

    assert response.status_code == 200
    page = response.content.decode()
    for link in (
        "/api/cortex/sessions/",
        "/api/docs/",
        "/api/schema/",
        "/api/auth/login/?next=/api/docs/",
        "/admin/",
    ):
        assert f'href="{link}"' in page, link
    for username, org, _is_admin in DEMO_USERS:
        assert f"<code>{username}</code>" in page
        assert org in page
    assert "<code>demo</code>" in page


@pytest.mark.django_db
def test_every_link_of_the_front_page_is_served(client, demo_urls):
    for link in ("/api/docs/", "/api/schema/", "/api/auth/login/?next=/api/docs/"):
        assert client.get(link).status_code == 200, link
    assert client.get("/admin/").status_code == 302  # to the admin's log-in
    assert client.get("/api/cortex/sessions/").status_code in (401, 403)  # needs a log-in
