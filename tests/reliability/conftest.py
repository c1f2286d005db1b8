"""Fixtures of the reliability tests (docs/design.md §12): the API fixtures, reused."""

from tests.api.conftest import (  # noqa: F401
    alice,
    alice_scope,
    api,
    client_for,
    make_user,
    missing_id,
    org_resolver,
)
