"""Canonical session URIs: ``cortex-session:<payload>`` (docs/design.md §8.1).

``payload`` is the unpadded base64url (RFC 4648 §5, alphabet ``A-Z a-z 0-9 - _``) of the UTF-8
bytes of the session id encoded as a JSON string by ``json.dumps(session_id,
ensure_ascii=False)``. That JSON form is exactly ECMAScript's ``JSON.stringify`` for a
well-formed string: only ``"`` and ``\\`` and the controls U+0000-U+001F are escaped (``\\b``,
``\\t``, ``\\n``, ``\\f``, ``\\r`` by their short forms, the others as ``\\u00xx`` with lower-case
hex); every other character, DEL, U+2028 and U+2029 included, is written as itself.

Decoding accepts only that canonical form: anything that does not re-encode to the identical URI
(padding, ``+`` or ``/``, non-zero trailing bits, whitespace in the JSON, an escape such as
``"\\u0061"`` where the character itself is canonical, a JSON value that is not a string) raises
:class:`~cortex_sessions.references.errors.InvalidReference`.

Session ids are non-empty strings without lone surrogates (those cannot be UTF-8); any other
Python ``str`` round-trips.
"""

from __future__ import annotations

import base64
import binascii
import json
import re

from ..content import parse_json
from .errors import InvalidReference

__all__ = ["SESSION_URI_PREFIX", "decode_session_uri", "encode_session_uri"]

SESSION_URI_PREFIX = "cortex-session:"
_PAYLOAD = re.compile(r"[A-Za-z0-9_-]+")


def encode_session_uri(session_id: str) -> str:
    """The canonical URI of a session id (docs/design.md §8.1).

    Args:
        session_id: any non-empty ``str`` without lone surrogates.

    Returns:
        ``"cortex-session:" + b64url_nopad(utf8(json.dumps(session_id, ensure_ascii=False)))``.

    Raises:
        InvalidReference: ``session_id`` is not a ``str``, is empty, or holds a lone surrogate.
    """
    if not isinstance(session_id, str) or not session_id:
        raise InvalidReference("A session id must be a non-empty string.")
    try:
        raw = json.dumps(session_id, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidReference("A session id cannot contain lone surrogates.") from exc
    return SESSION_URI_PREFIX + base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode_session_uri(uri: str) -> str:
    """The session id of a canonical session URI (docs/design.md §8.1).

    Args:
        uri: ``"cortex-session:<payload>"``.

    Returns:
        The session id (a non-empty ``str``).

    Raises:
        InvalidReference: ``uri`` is not a ``str``, lacks the prefix, has a payload outside
            ``[A-Za-z0-9_-]+``, does not decode to UTF-8 JSON holding a non-empty string, or is
            not the canonical encoding of that string.
    """
    if not isinstance(uri, str) or not uri.startswith(SESSION_URI_PREFIX):
        raise InvalidReference("A session URI starts with 'cortex-session:'.")
    payload = uri[len(SESSION_URI_PREFIX) :]
    if not _PAYLOAD.fullmatch(payload) or len(payload) % 4 == 1:
        raise InvalidReference("The session URI payload is not unpadded base64url.")
    try:
        raw = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
        value = parse_json(raw.decode("utf-8"))
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise InvalidReference("The session URI payload is not UTF-8 JSON.") from exc
    if not isinstance(value, str) or not value:
        raise InvalidReference("The session URI does not hold a non-empty string id.")
    if encode_session_uri(value) != uri:  # also refuses ids decoding to lone surrogates
        raise InvalidReference("The session URI is not in canonical form.")
    return value
