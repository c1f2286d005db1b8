"""``services.set_retention``: the host's legal hold and ``expires_at`` (docs/design.md §18.1)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from cortex_sessions import services
from cortex_sessions.exceptions import InvalidInput, LegalHold
from cortex_sessions.models import Session

pytestmark = pytest.mark.django_db

SCOPE = "org=acme/user=1"


def test_a_hold_blocks_deletes_until_released():
    session = services.create_session(scope=SCOPE, agent_id="a")
    held = services.set_retention(scope=SCOPE, session_id=session.pk, legal_hold=True)
    assert held.legal_hold is True
    with pytest.raises(LegalHold):
        services.delete_session(scope=SCOPE, session_id=session.pk)
    services.set_retention(scope=SCOPE, session_id=session.pk, legal_hold=False)
    services.delete_session(scope=SCOPE, session_id=session.pk)
    assert not Session.objects.filter(pk=session.pk).exists()


@pytest.mark.parametrize("bad", ["false", "true", None, 0, 1])
def test_a_hold_that_is_not_a_bool_is_refused_and_nothing_is_written(bad):
    session = services.create_session(scope=SCOPE, agent_id="a")
    services.set_retention(scope=SCOPE, session_id=session.pk, legal_hold=True)
    with pytest.raises(InvalidInput) as raised:
        services.set_retention(scope=SCOPE, session_id=session.pk, legal_hold=bad)
    assert raised.value.field == "legal_hold"
    assert Session.objects.get(pk=session.pk).legal_hold is True


def test_it_reaches_an_expired_session_the_sweep_has_not_deleted():
    session = services.create_session(scope=SCOPE, agent_id="a")
    Session.objects.filter(pk=session.pk).update(expires_at=timezone.now() - timedelta(hours=1))
    later = timezone.now() + timedelta(days=1)
    revived = services.set_retention(scope=SCOPE, session_id=session.pk, expires_at=later)
    assert revived.expires_at == later
    assert services.get_session(scope=SCOPE, session_id=session.pk).pk == session.pk
