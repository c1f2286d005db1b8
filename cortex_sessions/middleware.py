"""Credentials holding a NUL byte, kept away from the database (docs/design.md §7.3).

Django's ``ModelBackend`` and database session store pass a username or session key to the
database as the client sent it. PostgreSQL refuses a NUL in text (``DataError``: an HTML 500 on
every URL that reads the user, the admin's included), and MariaDB's ``utf8mb4_unicode_ci``
ignores it when comparing (``'alice\\0' = 'alice'``). No real username or session key holds one.

The app's API refuses such a request itself (:mod:`cortex_sessions.api.authentication`: 401/403
``authentication_failed``). For the admin and the host's other views, add
:class:`NulCredentialsMiddleware` before ``SessionMiddleware``: it drops the credential, so the
request goes on as anonymous (the admin then redirects to its log-in page).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from django.utils.deprecation import MiddlewareMixin

__all__ = ["NUL_CREDENTIALS_DROPPED", "NulCredentialsMiddleware", "carries_nul_credentials"]

#: ``request.META`` key :class:`NulCredentialsMiddleware` sets when it dropped a credential, so
#: the API behind it still answers ``authentication_failed`` (not ``not_authenticated``).
NUL_CREDENTIALS_DROPPED = "cortex_sessions.nul_credentials_dropped"


def _authorization_has_nul(header: str) -> bool:
    """Whether an ``Authorization`` header holds a NUL, as sent or inside HTTP Basic's base64
    (decoded as DRF's ``BasicAuthentication`` decodes it: characters outside the alphabet are
    skipped)."""
    if "\x00" in header:
        return True
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        # The header's bytes as DRF reads them (ISO-8859-1), then base64 as DRF decodes it.
        return b"\x00" in base64.b64decode(token.strip().encode("iso-8859-1"))
    except (binascii.Error, ValueError):  # not base64: the authentication class refuses it
        return False


def _nul_session_cookie(request: HttpRequest) -> bool:
    return "\x00" in request.COOKIES.get(settings.SESSION_COOKIE_NAME, "")


def carries_nul_credentials(request: HttpRequest) -> bool:
    """Whether ``request`` carries a credential with a NUL byte: the ``Authorization`` header
    (as sent, or decoded from HTTP Basic) or the session cookie (``SESSION_COOKIE_NAME``), or
    :class:`NulCredentialsMiddleware` dropped one of them.

    Args:
        request: a Django ``HttpRequest`` (or DRF ``Request``, which passes attributes through).

    Returns:
        ``True`` when such a credential was sent.
    """
    if request.META.get(NUL_CREDENTIALS_DROPPED):
        return True
    return _authorization_has_nul(request.META.get("HTTP_AUTHORIZATION", "")) or (
        _nul_session_cookie(request)
    )


class NulCredentialsMiddleware(MiddlewareMixin):
    """Drop a session cookie or ``Authorization`` header that holds a NUL byte, before Django's
    ``SessionMiddleware`` and ``AuthenticationMiddleware`` (and DRF's authentication) read it.

    Put it before ``SessionMiddleware`` in ``MIDDLEWARE``; synchronous and asynchronous (through
    ``MiddlewareMixin``). The request goes on as if it had no such credential: a page that needs
    a log-in redirects to it, the app's API answers ``authentication_failed`` (the middleware
    marks the request with :data:`NUL_CREDENTIALS_DROPPED`). Other cookies and a clean header are
    left as they are. See the module docstring for why (docs/design.md §7.3).
    """

    def process_request(self, request: HttpRequest) -> Any:
        """Remove the NUL-bearing credentials from ``request`` and mark it; returns ``None``."""
        dropped = False
        if _nul_session_cookie(request):
            del request.COOKIES[settings.SESSION_COOKIE_NAME]
            dropped = True
        if _authorization_has_nul(request.META.get("HTTP_AUTHORIZATION", "")):
            del request.META["HTTP_AUTHORIZATION"]
            dropped = True
        if dropped:
            request.META[NUL_CREDENTIALS_DROPPED] = True
        return None
