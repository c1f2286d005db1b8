"""``_pg_run.built``: the instances the PostgreSQL hot paths return, as ``Model.from_db`` builds
them (docs/design.md §14), whichever of the fields the values hold."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from django.db.models import DEFERRED

from cortex_sessions.models import Message
from cortex_sessions.services._pg_run import built


def _every_field() -> dict[str, object]:
    return {
        "id": 7,
        "session_id": uuid.uuid4(),
        "agent_id": "bot",
        "scope": "org=a",
        "seq": 3,
        "role": "user",
        "source": "user",
        "content": [{"type": "text", "text": "hi"}],
        "metadata": {},
        "created_at": datetime(2026, 1, 2, tzinfo=UTC),
        "usage": None,
        "token_count": 1,
        "compacts_through_seq": None,
    }


def test_values_of_every_field_load_each_into_its_own_attribute() -> None:
    values = _every_field()
    assert set(values) == {field.attname for field in Message._meta.concrete_fields}
    # Given in another order than the model's: each value still lands on its own field.
    message = built(Message, "default", dict(reversed(values.items())))
    assert {name: getattr(message, name) for name in values} == values
    assert message.get_deferred_fields() == set()
    assert message._state.db == "default" and not message._state.adding


def test_a_missing_field_is_deferred_and_an_unknown_key_ignored() -> None:
    values = _every_field()
    del values["usage"]
    values["not_a_field"] = "ignored"  # as many keys as the model has fields, one unknown
    message = built(Message, "other", values)
    assert message.get_deferred_fields() == {"usage"}
    assert message.__dict__.get("usage", DEFERRED) is DEFERRED
    assert not hasattr(message, "not_a_field")
    assert message.seq == 3 and message.token_count == 1 and message._state.db == "other"
