"""The usage totals stay exact under concurrent writes to one session (docs/design.md
§16.1-§16.2), with real threads and transactions on PostgreSQL and MySQL/MariaDB (skipped on
SQLite, which serializes writers): appends of one and of many messages (on PostgreSQL the one
statement of §14 and, with ``orm``, the ORM path), pops and deletes racing them."""

from __future__ import annotations

from contextlib import suppress
from decimal import Decimal

import pytest

from cortex_sessions import services
from cortex_sessions.exceptions import MessageNotFound
from cortex_sessions.models import Message, Session
from cortex_sessions.services import _pg
from cortex_sessions.usage import sums_of
from tests.test_concurrency import run_together

pytestmark = [pytest.mark.concurrent_db, pytest.mark.django_db(transaction=True)]

SCOPE = "org=acme/user=1"


@pytest.fixture(params=["default", "orm"])
def path(request, monkeypatch):
    if request.param == "orm":
        if not _pg.enabled("default"):
            pytest.skip("the ORM path is the vendor's path here (the 'default' run covers it)")
        monkeypatch.setattr(_pg, "enabled", lambda alias: False)
    return request.param


def _usage(index: int, number: int) -> dict:
    return {
        "input_tokens": index + 1,
        "output_tokens": number,
        "cost": f"0.{index + 1:03d}{number:03d}",
    }


def _stored_totals(session) -> tuple:
    row = Session.objects.get(pk=session.pk)
    return (row.message_count, row.input_tokens, row.output_tokens, row.cost, row.context_tokens)


def _row_totals(session) -> tuple:
    rows = Message.objects.using("default").filter(session=session)
    sums = sums_of(rows)
    return (rows.count(), sums.input_tokens, sums.output_tokens, sums.cost, sums.context_tokens)


def test_concurrent_appends_keep_the_totals_exact(path):
    session = services.create_session(scope=SCOPE, agent_id="agent")
    threads, appends = 6, 25

    def append(index: int) -> None:
        for number in range(appends):
            batch = [
                {
                    "role": "assistant",
                    "content": f"t{index} n{number}",
                    "usage": _usage(index, number),
                }
            ]
            if number % 5 == 0:  # some appends carry several messages
                batch.append({"role": "user", "content": "and more words " * (number + 1)})
            services.append_messages(scope=SCOPE, session_id=session.pk, messages=batch)

    run_together(threads, append)

    expected_cost = sum(
        (Decimal(_usage(i, n)["cost"]) for i in range(threads) for n in range(appends)),
        Decimal(0),
    )
    stored = _stored_totals(session)
    assert stored == _row_totals(session)
    assert stored[1] == sum((i + 1) * appends for i in range(threads))
    assert stored[3] == expected_cost


def test_pops_and_deletes_racing_appends_keep_the_totals_exact(path):
    session = services.create_session(scope=SCOPE, agent_id="agent")
    services.append_messages(
        scope=SCOPE,
        session_id=session.pk,
        messages=[
            {"role": "assistant", "content": f"seed {n}", "usage": _usage(9, n)} for n in range(40)
        ],
    )

    def work(index: int) -> None:
        for number in range(15):
            if index % 3 == 0:
                services.append_messages(
                    scope=SCOPE,
                    session_id=session.pk,
                    messages=[
                        {"role": "assistant", "content": "new", "usage": _usage(index, number)}
                    ],
                )
            elif index % 3 == 1:
                with suppress(MessageNotFound):  # emptied by the others
                    services.pop_message(scope=SCOPE, session_id=session.pk)
            else:
                with suppress(MessageNotFound):  # another thread deleted or popped it first
                    services.delete_message(
                        scope=SCOPE, session_id=session.pk, seq=1 + number * 2 + index
                    )

    run_together(6, work)

    assert _stored_totals(session) == _row_totals(session)
