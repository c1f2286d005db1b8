"""The API's authentication step: any credential a client can send is a user, anonymous, or a
coded refusal — never a 500 (docs/design.md §7.3).

DRF's authentication classes hand what the client sent to Django's backends and session store,
which pass it to the database. A NUL byte there is a ``DataError`` on PostgreSQL (psycopg 3;
a ``ValueError`` with psycopg 2) and is ignored in comparisons by MariaDB's
``utf8mb4_unicode_ci`` (``alice\\0`` would log in as alice). :func:`authenticate` refuses a
request carrying one before any authentication class runs, and turns what the database raises
for a credential it cannot take into the same refusal.
"""

from __future__ import annotations

from typing import Any

from django.db import DataError
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request
from rest_framework.settings import api_settings

from cortex_sessions.middleware import carries_nul_credentials

__all__ = ["authenticate"]

NUL_MESSAGE = "Credentials must not contain NUL characters."


def _refuse(request: Request, detail: str) -> AuthenticationFailed:
    """Leave ``request`` anonymous, as DRF does after a failed authentication, and return the
    error to raise (DRF sends 401 with ``WWW-Authenticate`` when the first authentication class
    names a scheme, else 403)."""
    unauthenticated_user: Any = api_settings.UNAUTHENTICATED_USER
    unauthenticated_token: Any = api_settings.UNAUTHENTICATED_TOKEN
    user: Any = unauthenticated_user() if unauthenticated_user else None
    request.user = user
    request.auth = unauthenticated_token() if unauthenticated_token else None
    return AuthenticationFailed(detail)


def authenticate(request: Request) -> None:
    """Authenticate ``request`` as DRF's ``APIView.perform_authentication`` does (``request.user``),
    refusing credentials no database can be asked about.

    Args:
        request: the DRF request of one of the app's views.

    Raises:
        AuthenticationFailed: ``authentication_failed`` (401/403) when the ``Authorization``
            header (as sent or decoded from HTTP Basic) or the session cookie holds a NUL byte
            (:func:`cortex_sessions.middleware.carries_nul_credentials`; also when
            ``NulCredentialsMiddleware`` dropped one), whatever other credential comes with it;
            or when an authentication class's database lookup raises ``DataError`` or
            ``ValueError`` (a value the driver cannot send, such as a NUL in a host's own
            credential); and whatever the authentication classes raise.
    """
    if carries_nul_credentials(request):
        raise _refuse(request, NUL_MESSAGE)
    try:
        request.user  # noqa: B018 - DRF authenticates on first access
    except (DataError, ValueError) as error:
        raise _refuse(request, "Credentials could not be checked.") from error
