"""The scope value object and its matching predicates (docs/design.md §2.1–2.4)."""

from __future__ import annotations

import pytest
from django.test import override_settings
from hypothesis import given, settings
from hypothesis import strategies as st

from cortex_sessions import services
from cortex_sessions.exceptions import InvalidScope, NoScope
from cortex_sessions.models import Session
from cortex_sessions.scope import MAX_CANONICAL_BYTES, Scope, as_scope, canonical_of, scope_q

keys = st.from_regex(r"[a-z][a-z0-9_.-]{0,15}", fullmatch=True)
values = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=40
) | st.sampled_from(["a/b", "x=y", "100%", "%2F", "with space", "emoji 🎉👩‍👩‍👧", "=/%", "é"])
level_lists = st.lists(st.tuples(keys, values), min_size=1, max_size=3)


@given(level_lists)
@settings(max_examples=300)
def test_canonical_form_and_parse_are_exact_inverses(levels):
    scope = Scope.from_levels(levels)
    assert Scope.parse(scope.canonical) == scope
    assert Scope.parse(scope.canonical).canonical == scope.canonical
    assert scope.levels == tuple(levels)


@given(level_lists)
@settings(max_examples=100)
def test_canonical_form_has_one_separator_per_level_boundary(levels):
    canonical = Scope.from_levels(levels).canonical
    assert canonical.count("/") == len(levels) - 1
    assert canonical.count("=") == len(levels)


def test_reserved_characters_in_values_are_percent_encoded():
    scope = Scope.from_levels([("path", "a/b=c%d")])
    assert scope.canonical == "path=a%2Fb%3Dc%25d"
    assert str(scope) == scope.canonical


def test_scope_is_hashable_and_immutable():
    a = Scope.parse("org=acme/project=apollo")
    b = Scope.from_levels([("org", "acme"), ("project", "apollo")])
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    with pytest.raises(AttributeError):
        a.levels = ()  # type: ignore[misc]


@pytest.mark.parametrize(
    "text",
    [
        "org",  # no '='
        "org=",  # empty value
        "=acme",  # empty key
        "Org=acme",  # upper-case key
        "1org=acme",  # key must start with a letter
        "org=acme/",  # empty level
        "org=a=b",  # '=' not encoded
        "org=a%2fb",  # lower-case escape is not canonical
        "org=100%",  # stray '%'
        "org=a%41",  # only %25, %2F, %3D are escapes
        "org=a\x00b",  # control character
        "org=a\nb",
        "org=acme//user=1",
        "k" * 65 + "=v",  # key over 64 characters
    ],
)
def test_malformed_scope_strings_raise_invalid_scope(text):
    with pytest.raises(InvalidScope) as info:
        Scope.parse(text)
    assert info.value.code == "invalid_scope"


@pytest.mark.parametrize("text", [None, "", "   "])
def test_missing_or_empty_scope_raises_no_scope(text):
    with pytest.raises(NoScope) as info:
        Scope.parse(text)
    assert info.value.code == "no_scope"


def test_no_levels_is_no_scope():
    with pytest.raises(NoScope):
        Scope.from_levels([])


@pytest.mark.parametrize(
    "levels",
    [
        [("org", "")],
        [("org", "x" * 256)],
        [("", "x")],
        [("org", 5)],
        [("org", "tab\there")],
        [("org", "surrogate\ud800")],
        [("org",)],
    ],
)
def test_invalid_levels_are_refused_not_dropped(levels):
    with pytest.raises(InvalidScope):
        Scope.from_levels(levels)


def test_value_of_255_characters_is_accepted():
    assert Scope.from_levels([("org", "x" * 255)]).levels[0][1] == "x" * 255


def test_more_levels_than_max_scope_depth_is_refused():
    Scope.parse("a=1/b=2/c=3")
    with pytest.raises(InvalidScope):
        Scope.parse("a=1/b=2/c=3/d=4")


@override_settings(CORTEX_SESSIONS={"MAX_SCOPE_DEPTH": 5})
def test_max_scope_depth_setting_is_read_live():
    assert Scope.parse("a=1/b=2/c=3/d=4/e=5").depth == 5
    with pytest.raises(InvalidScope):
        Scope.parse("a=1/b=2/c=3/d=4/e=5/f=6")


def test_canonical_form_over_the_byte_limit_is_refused():
    # Three levels of 255 four-byte characters would overflow PostgreSQL's B-tree entries.
    with pytest.raises(InvalidScope) as info:
        Scope.from_levels([("a", "🎉" * 255), ("b", "🎉" * 255)])
    assert str(MAX_CANONICAL_BYTES) in info.value.message


def test_contains_is_a_level_wise_prefix():
    acme = Scope.parse("org=acme")
    assert acme.contains(acme)
    assert acme.contains(Scope.parse("org=acme/project=x"))
    assert not acme.contains(Scope.parse("org=acme2"))
    assert not acme.contains(Scope.parse("org=acme2/project=x"))
    assert not Scope.parse("org=acme/project=x").contains(acme)


def test_as_scope_accepts_scope_or_string_and_refuses_none():
    scope = Scope.parse("org=acme")
    assert as_scope(scope) is scope
    assert as_scope("org=acme") == scope
    with pytest.raises(NoScope):
        as_scope(None)


def test_scope_q_refuses_a_missing_scope():
    with pytest.raises(NoScope):
        scope_q(None)
    with pytest.raises(NoScope):
        scope_q("")


@pytest.mark.django_db
def test_prefix_match_includes_descendants_but_never_siblings_with_a_longer_name():
    stored = [
        "org=acme",
        "org=acme/project=x",
        "org=acme/project=x/user=1",
        "org=acme2",
        "org=acme2/project=x",
        "org=acme-2",
        "org=acm",
        "org=acme%2Fevil",
        "org=acme_",
    ]
    for scope in stored:
        Session.objects.create(agent_id="a", scope=scope)

    def matched(scope: str, exact: bool = False) -> set[str]:
        return set(
            Session.objects.filter(scope_q(scope, exact=exact)).values_list("scope", flat=True)
        )

    assert matched("org=acme") == {"org=acme", "org=acme/project=x", "org=acme/project=x/user=1"}
    assert matched("org=acme", exact=True) == {"org=acme"}
    assert matched("org=acme/project=x") == {"org=acme/project=x", "org=acme/project=x/user=1"}
    assert matched("org=acme2") == {"org=acme2", "org=acme2/project=x"}


@st.composite
def related_scope_pairs(draw):
    """Two scopes that often share a prefix, so both outcomes of ``contains`` are exercised."""
    base = draw(level_lists)
    keep = draw(st.integers(min_value=0, max_value=len(base)))
    extra = draw(st.lists(st.tuples(keys, values), max_size=3 - keep))
    other = base[:keep] + extra or base
    return base, other


@pytest.mark.django_db
@given(pair=related_scope_pairs())
@settings(max_examples=80, deadline=None)
def test_database_prefix_match_agrees_with_contains(pair):
    outer, candidate = Scope.from_levels(pair[0]), Scope.from_levels(pair[1])
    Session.objects.all().delete()
    Session.objects.create(agent_id="a", scope=candidate.canonical)
    found = services.count_sessions(scope=outer) == 1
    assert found == outer.contains(candidate)
    found_exact = (
        services.count_sessions(scope=outer, filters=services.SessionFilters(exact=True)) == 1
    )
    assert found_exact == (outer == candidate)


def test_a_parsed_scope_obeys_a_later_change_of_max_scope_depth():
    # Parsing remembers recent scopes (services parse the caller's scope on every call); the
    # depth in force is part of what it remembers by.
    text = "a=1/b=2/c=3/d=4"
    with override_settings(CORTEX_SESSIONS={"MAX_SCOPE_DEPTH": 4}):
        assert Scope.parse(text).depth == 4
    with pytest.raises(InvalidScope, match="at most 3 levels"):
        Scope.parse(text)
    with override_settings(CORTEX_SESSIONS={"MAX_SCOPE_DEPTH": 4}):
        assert Scope.parse(text) == Scope.from_levels(
            [("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")]
        )


def test_a_refused_scope_is_refused_every_time():
    for _ in range(3):
        with pytest.raises(InvalidScope):
            Scope.parse("org=a/org")
        with pytest.raises(NoScope):
            Scope.parse("  ")


@pytest.mark.parametrize("value", ["org=a%2Fb/user=1", Scope.from_levels([("org", "a/b")])])
def test_canonical_of_a_scope_or_its_string(value):
    assert canonical_of(value) == as_scope(value).canonical
    with pytest.raises(InvalidScope):
        canonical_of("org=a/b")
    with pytest.raises(NoScope):
        canonical_of(None)
