"""What every supported database must agree on (docs/design.md §2.3, §6, §15).

These run on SQLite, PostgreSQL and MySQL/MariaDB alike. MySQL's default collations fold case
and accents and its ``utf8mb4_bin`` ignores trailing spaces; each test here fails on MariaDB
without the column types of ``cortex_sessions.fields``.
"""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction

from cortex_sessions import services
from cortex_sessions.models import ImportedConversation, Message, Session

pytestmark = pytest.mark.django_db

SCOPE = "org=acme"
LOOKALIKE_AGENTS = ["bot", "Bot", "BOT", "bot ", "bót", "bøt"]


def test_agent_ids_differing_in_case_accent_or_a_trailing_space_are_different_agents():
    defaults = {
        agent: services.resolve_session(scope=SCOPE, agent_id=agent) for agent in LOOKALIKE_AGENTS
    }

    assert all(created for _, created in defaults.values())
    assert len({session.pk for session, _ in defaults.values()}) == len(LOOKALIKE_AGENTS)
    for agent, (session, _) in defaults.items():
        assert services.resolve_session(scope=SCOPE, agent_id=agent) == (session, False)
        listed = services.session_queryset(
            scope=SCOPE, filters=services.SessionFilters(agent_id=agent)
        )
        assert list(listed.values_list("agent_id", flat=True)) == [agent]


@pytest.mark.parametrize(
    "lookalike",
    ["org=acme ", "org=Acme", "org=ACME", "org=acmé", "org=acme%2F", "org=acme%2Fx", "org=acme-x"],
)
def test_a_scope_value_that_only_looks_alike_is_another_scope(lookalike):
    """Trailing spaces, case, accents and an escaped ``/`` never make two scopes one."""
    at_scope = services.create_session(scope=SCOPE, agent_id="a", title="at")
    beneath = services.create_session(scope=f"{SCOPE}/user=1", agent_id="a", title="beneath")
    other = services.create_session(scope=lookalike, agent_id="a", title="other")

    within = set(services.session_queryset(scope=SCOPE).values_list("pk", flat=True))
    exact = set(
        services.session_queryset(
            scope=SCOPE, filters=services.SessionFilters(exact=True)
        ).values_list("pk", flat=True)
    )
    theirs = set(services.session_queryset(scope=lookalike).values_list("pk", flat=True))

    assert within == {at_scope.pk, beneath.pk}
    assert exact == {at_scope.pk}
    assert theirs == {other.pk}
    assert services.count_sessions(scope=SCOPE) == 2
    assert Session.objects.get(pk=other.pk).scope == lookalike


def test_a_scope_of_1024_utf8_bytes_is_stored_indexed_and_matched_whole():
    value = "ü" * 200 + "x" * 10  # 410 UTF-8 bytes: a level is capped at 255 characters
    long_scope = f"org={value}/team={value}/u={'y' * 191}"
    assert len(long_scope.encode()) == 1024
    session = services.create_session(scope=long_scope, agent_id="a")
    services.append_messages(
        scope=long_scope, session_id=session.pk, messages=[{"role": "user", "content": "hi"}]
    )
    resolved, created = services.resolve_session(scope=long_scope, agent_id="a")

    assert created and resolved.is_default
    assert Session.objects.get(pk=session.pk).scope == long_scope
    assert Message.objects.get(session=session).scope == long_scope
    assert services.count_sessions(scope=f"org={value}") == 2
    assert (
        services.count_sessions(
            scope=f"org={value}/team={value}", filters=services.SessionFilters(exact=True)
        )
        == 0
    )


def test_the_database_refuses_a_second_default_for_the_same_agent_and_scope():
    first, _ = services.resolve_session(scope=SCOPE, agent_id="a")
    second = services.create_session(scope=SCOPE, agent_id="a")
    services.create_session(scope=SCOPE, agent_id="a")  # many non-defaults are fine

    with pytest.raises(IntegrityError), transaction.atomic():
        Session.objects.filter(pk=second.pk).update(is_default=True)

    assert list(Session.objects.filter(is_default=True).values_list("pk", flat=True)) == [first.pk]


def test_default_flag_is_true_for_the_default_and_null_otherwise():
    default, _ = services.resolve_session(scope=SCOPE, agent_id="a")
    other = services.create_session(scope=SCOPE, agent_id="a")

    assert Session.objects.get(pk=default.pk).default_flag is True
    assert Session.objects.get(pk=other.pk).default_flag is None
    services.make_default(scope=SCOPE, session_id=other.pk)
    assert Session.objects.get(pk=default.pk).default_flag is None
    assert Session.objects.get(pk=other.pk).default_flag is True
    assert list(Session.objects.defaults_of(agent_id="a", scope=SCOPE)) == [
        Session.objects.get(pk=other.pk)
    ]


def test_imported_conversation_ids_differing_in_case_are_different_conversations():
    session = services.create_session(scope=SCOPE, agent_id="a")
    other = services.create_session(scope=SCOPE, agent_id="a")
    ImportedConversation.objects.create(
        session=session, agent_id="a", scope=SCOPE, external_id="Conv-1"
    )

    ImportedConversation.objects.create(
        session=other, agent_id="a", scope=SCOPE, external_id="conv-1"
    )

    assert ImportedConversation.objects.filter(external_id="conv-1").get().session == other


def test_title_search_folds_what_the_database_collation_folds():
    """README "Databases": ``search`` is case-insensitive everywhere; under MySQL/MariaDB's
    default ``utf8mb4`` collations it is accent-insensitive too."""
    for title in ["Café", "CAFE", "tea"]:
        services.create_session(scope=SCOPE, agent_id="a", title=title)

    found = set(
        services.session_queryset(
            scope=SCOPE, filters=services.SessionFilters(search="cafe")
        ).values_list("title", flat=True)
    )

    if connection.vendor == "mysql":
        assert found == {"Café", "CAFE"}
    else:
        assert found == {"CAFE"}
