"""The metadata filter's object and array values are compared as JSON values on every
database, as PostgreSQL's ``jsonb`` compares them (docs/design.md §11.3, §15.6): object keys in
any order at any depth, numbers by value (``1`` = ``1.0`` = ``1e0``), types kept (``1`` is not
``"1"`` nor ``true``), arrays in order, and no member more or less."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection

from cortex_sessions import services
from cortex_sessions.sqlite_json import canonical_json, canonical_json_text

SCOPE = "org=acme/user=1"

ROWS = {
    "ordered": {"o": {"x": 1, "y": {"p": [1, {"q": "r", "s": None}], "t": True}}},
    "numbers": {"o": {"n": 1.0, "f": 1.5, "z": 0}},
    "typed": {"o": {"n": "1", "b": True, "u": None}},
    "listed": {"a": [1, {"k": 2, "j": 1}, "s"]},
}

CASES = [
    # same object, keys reordered at every depth
    ({"o": {"y": {"t": True, "p": [1, {"s": None, "q": "r"}]}, "x": 1}}, {"ordered"}),
    ({"o": {"x": 1.0, "y": {"p": [1e0, {"q": "r", "s": None}], "t": True}}}, {"ordered"}),
    # numbers by value, nested
    ({"o": {"z": 0, "f": 1.5, "n": 1}}, {"numbers"}),
    ({"o": {"z": 0.0, "f": 15e-1, "n": 1}}, {"numbers"}),
    ({"o": {"z": 0, "f": 1.5, "n": "1"}}, set()),
    # types kept, nested
    ({"o": {"u": None, "b": True, "n": "1"}}, {"typed"}),
    ({"o": {"u": None, "b": 1, "n": "1"}}, set()),
    ({"o": {"u": "null", "b": True, "n": "1"}}, set()),
    ({"o": {"u": None, "b": True, "n": 1}}, set()),
    # no member more or less
    ({"o": {"x": 1}}, set()),
    ({"o": {"x": 1, "y": {"p": [1, {"q": "r", "s": None}], "t": True}, "extra": 1}}, set()),
    ({"o": {"x": 1, "y": {"p": [1, {"q": "r"}], "t": True}}}, set()),
    # arrays keep their order; objects inside them do not
    ({"a": [1, {"j": 1, "k": 2}, "s"]}, {"listed"}),
    ({"a": [1.0, {"k": 2.0, "j": 1}, "s"]}, {"listed"}),
    ({"a": ["s", {"k": 2, "j": 1}, 1]}, set()),
    ({"a": [1, {"k": 2, "j": 1}]}, set()),
]


@pytest.fixture
def rows(db):
    for title, metadata in ROWS.items():
        services.create_session(scope=SCOPE, agent_id="a", title=title, metadata=metadata)


@pytest.mark.parametrize(("filter_", "expected"), CASES)
def test_object_and_array_values_compare_as_json_values(rows, filter_, expected):
    found = {
        s.title
        for s in services.list_sessions(
            scope=SCOPE, filters=services.SessionFilters(metadata=filter_)
        )
    }
    assert found == expected, connection.vendor
    assert services.count_sessions(
        scope=SCOPE, filters=services.SessionFilters(metadata=filter_)
    ) == len(expected)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ({"b": 1, "a": [2, {"d": 3, "c": 4}]}, {"a": [2.0, {"c": 4, "d": 3e0}], "b": 1.0}),
        (-0.0, 0),
        (1e20, 100000000000000000000),
        ("é", "\u00e9"),
    ],
)
def test_canonical_forms_of_equal_values_are_equal(left, right):
    assert canonical_json(left) == canonical_json(right)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ({"a": 1}, {"a": "1"}),
        ({"a": 1}, {"a": True}),
        ({"a": None}, {"a": "null"}),
        ([1, 2], [2, 1]),
        ({"a": 1}, {"a": 1, "b": None}),
    ],
)
def test_canonical_forms_of_different_values_differ(left, right):
    assert canonical_json(left) != canonical_json(right)


def test_canonical_text_reads_numbers_as_exact_decimals():
    # jsonb's numeric is exact: two texts one binary float cannot tell apart still differ
    assert canonical_json_text("0.1") != canonical_json_text("0.1000000000000000055511151231257827")
    assert canonical_json_text('{"n": 1.50, "m": 2E+1, "k": -0}') == '{"k":0,"m":20,"n":1.5}'
    assert canonical_json_text("not json") is None
    assert canonical_json_text(None) is None
    assert Decimal(canonical_json_text("1e-7") or "") == Decimal("1e-7")
