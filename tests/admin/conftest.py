"""Fixtures of the admin tests."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission

from cortex_sessions import services
from cortex_sessions.models import Session


@pytest.fixture
def session_with_messages(scope):
    """A session with three conversation messages appended through the services."""

    def make(**kwargs: Any) -> Session:
        kwargs.setdefault("agent_id", "agent-1")
        session = services.create_session(scope=kwargs.pop("scope", scope), **kwargs)
        services.append_messages(
            scope=session.scope,
            session_id=session.pk,
            messages=[
                {"role": "user", "content": "first question"},
                {"role": "assistant", "content": "first answer"},
                {"role": "user", "content": "second question"},
            ],
        )
        session.refresh_from_db()
        return session

    return make


@pytest.fixture
def staff_client(client, django_user_model):
    """A client logged in as a staff user holding only the permissions named."""

    def make(*codenames: str):
        user = django_user_model.objects.create_user("staff", password="x", is_staff=True)
        user.user_permissions.set(
            Permission.objects.filter(
                content_type__app_label="cortex_sessions", codename__in=codenames
            )
        )
        client.force_login(user)
        return client

    return make
