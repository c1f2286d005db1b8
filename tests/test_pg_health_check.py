"""The hot paths and ``CONN_HEALTH_CHECKS`` (docs/design.md §14): ``_pg.serves``, the one way
into them, leaves Django's checks on an open connection to the cursor each path makes right
after, so a connection the server dropped between two requests is replaced before the
statement, as for any ORM query, on the core's paths and the LangGraph saver's alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection, connections

from cortex_sessions import services
from cortex_sessions.services import _pg

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not _pg.enabled("default"),
        reason="the hand-written SQL serves PostgreSQL through psycopg 3 only",
    ),
]

SCOPE = "org=acme/user=1"


@pytest.fixture
def health_checks(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Persistent connections with health checks, as a host sets them."""
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", None)
    monkeypatch.setitem(connection.settings_dict, "CONN_HEALTH_CHECKS", True)
    connection.close()
    yield
    connection.close()


def _dropped_by_the_server() -> int:
    """Start a request (its health check is due) and end this connection's server session from
    another connection, as a restart or an idle timeout would; return the old backend's pid."""
    connection.ensure_connection()
    connection.close_if_unusable_or_obsolete()  # what request_started does
    assert connection.connection is not None, "kept: persistent and usable"
    pid = connection.connection.info.backend_pid
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
            assert cursor.fetchone() == (True,)
    finally:
        other.close()
    return pid


def _append_one(pk: Any) -> None:
    services.append_messages(
        scope=SCOPE, session_id=pk, messages=[{"role": "user", "content": "one"}]
    )


def _append_two(pk: Any) -> None:
    two = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    services.append_messages(scope=SCOPE, session_id=pk, messages=two)


def _get(pk: Any) -> None:
    assert services.get_session(scope=SCOPE, session_id=pk).pk == pk


def _newest(pk: Any) -> None:
    services.list_messages(scope=SCOPE, session_id=pk, limit=50)


CALLS: list[Callable[[Any], None]] = [_append_one, _append_two, _get, _newest]


@pytest.mark.parametrize("call", CALLS, ids=lambda call: call.__name__.strip("_"))
def test_a_connection_the_server_dropped_is_replaced_before_a_hot_path(health_checks, call):
    session = services.create_session(scope=SCOPE, agent_id="agent-1")
    pid = _dropped_by_the_server()
    assert _pg.serves("default")  # an open connection: the checks are the cursor's
    call(session.pk)
    assert connection.connection.info.backend_pid != pid


def test_a_connection_the_server_dropped_is_replaced_before_a_langgraph_write(health_checks):
    pytest.importorskip("langgraph.checkpoint.base")
    from langgraph.checkpoint.base import empty_checkpoint

    from cortex_sessions.integrations.langgraph import CortexCheckpointSaver

    saver = CortexCheckpointSaver(scope=SCOPE, agent_id="agent-1")
    config = {"configurable": {"thread_id": str(services.create_session(
        scope=SCOPE, agent_id="agent-1").pk), "checkpoint_ns": ""}}  # fmt: skip
    config = saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
    pid = _dropped_by_the_server()
    saver.put_writes(config, [("step", 1)], "task")
    assert connection.connection.info.backend_pid != pid
    assert saver.get_tuple(config).pending_writes == [("task", "step", 1)]
