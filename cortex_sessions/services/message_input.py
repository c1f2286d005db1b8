"""Message input: what one message to append is, its validation into the row to store, and the
checks on an append's messages that read no database (docs/design.md §3.2, §7.3, §12.6).

Split from :mod:`.messages` (which re-exports every name here, and
:mod:`cortex_sessions.services` the public ones): every append path builds its rows here —
``append_messages``, the keyed and recorded appends (:mod:`.keyed_append`), compaction and
the runtime adapters that validate a message once (``append_built``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple, NoReturn

from django.utils import timezone

from ..conf import app_settings
from ..content import check_json_value, json_text, normalize_content, utf8_size
from ..exceptions import InvalidInput, InvalidRole, InvalidSource, MessageTooLarge, TooManyMessages
from ..models import Message
from ..tokens import count_tokens
from ..usage import check_usage
from ._common import _check_metadata

__all__ = [
    "MessageInput",
    "build_message",
    "check_message_count",
    "check_messages",
]


@dataclass(frozen=True)
class MessageInput:
    """One message to append (docs/design.md §3.2, §7.3).

    Attributes:
        role: ``user``, ``assistant``, ``system`` or ``tool``.
        content: a string (becomes one text block) or a list of content blocks.
        source: ``user``, ``checkpoint``, ``session-reference`` or ``host``; defaults to
            ``user`` for the ``user`` role and ``host`` for the others.
        metadata: host-owned JSON object.
        created_at: when the message was written; defaults to now (importers pass the original).
        usage: what producing it cost, or ``None`` (docs/design.md §16.1,
            :func:`cortex_sessions.usage.check_usage`).
    """

    role: str
    content: Any
    source: str | None = None
    metadata: Mapping[str, Any] | None = None
    created_at: datetime | None = None
    usage: Mapping[str, Any] | None = None


#: Roles and sources a message may have (``Model.TextChoices.values`` builds a list each time).
_ROLES = tuple(Message.Role.values)
_SOURCES = tuple(Message.Source.values)
_INPUT_KEYS = frozenset({"role", "content", "source", "metadata", "created_at", "usage"})

#: ``json_text([{"type": "text", "text": text}])`` with the encoded text in place of ``%s``: a
#: string's encoding is the encoder's fast path, where a list of blocks makes it build its
#: iterating encoder on every call (~2 µs of an append's Python; docs/performance.md).
_TEXT_BLOCK_JSON = '[{"type":"text","text":%s}]'


def _refuse_choice(
    value: Any, choices: Sequence[str], *, field: str, error: type[InvalidInput]
) -> NoReturn:
    """Refuse ``value``, which is not one of ``choices``, with the field's own ``error``
    (``InvalidRole``, ``InvalidSource``). Before that, a string holding NUL is refused as
    ``nul_character`` and one with a lone surrogate as ``invalid_text``, as in every other
    string (docs/design.md §12.4, one code per rule)."""
    if isinstance(value, str):
        check_json_value(value, field=field)
    raise error(f"{field} must be one of {', '.join(choices)}; got {value!r}.", field=field)


class _BuiltMessage(NamedTuple):
    """One validated message input, as :func:`_build_message` returns it."""

    #: The values of ``role``, ``source``, ``content``, ``metadata``, ``created_at``, ``usage``
    #: and ``token_count`` as they are stored (without session, agent, scope and seq, which the
    #: session gives).
    columns: dict[str, Any]
    #: ``content`` and ``metadata`` as the JSON text validation encoded (and measured): the
    #: PostgreSQL path sends it as is rather than encoding the values again.
    content_json: str
    metadata_json: str
    #: The ``created_at`` the input gave (an import), as given, or ``None`` (the append's clock):
    #: an idempotency key's fingerprint is of the input, not of the value stored.
    given_time: datetime | None
    #: ``usage`` as JSON text, or ``None`` (SQL ``NULL``).
    usage_json: str | None = None


#: ``Message.created_at``, whose ``get_prep_value`` makes a naive datetime aware.
_CREATED_AT = Message._meta.get_field("created_at")


def build_message(
    item: MessageInput | Mapping[str, Any], index: int, now: datetime
) -> _BuiltMessage:
    """Validate one message input; ``now`` is its ``created_at`` when the input gives none.

    A naive ``created_at`` given with ``USE_TZ`` is made aware here as the ORM makes it aware
    when it saves one (``DateTimeField.get_prep_value``: a ``RuntimeWarning``, then the default
    time zone), so both paths store the same instant (the PostgreSQL statement would read it
    in the connection's time zone, UTC) and the returned message holds what was stored.
    Public for the adapters that append in statements of their own (the LangGraph saver's
    mirror, docs/design.md §19.1).

    Args:
        item: a ``MessageInput`` or a mapping of its keys (docs/design.md §3.2).
        index: its position in the call's list, for the error's text.
        now: the default ``created_at`` (aware with ``USE_TZ``).

    Returns:
        The row's column values and its ``content``, ``metadata`` and ``usage`` as JSON text.

    Raises:
        InvalidInput (InvalidContent, InvalidMetadata, MessageTooLarge, …): the input is not a
            storable message (docs/design.md §3.2, §9).
    """
    if type(item) is dict or isinstance(item, Mapping):  # a dict skips the ABC check
        unknown = item.keys() - _INPUT_KEYS
        if unknown:
            raise InvalidInput(
                f"messages[{index}] has unknown keys: {', '.join(sorted(map(str, unknown)))}.",
                field="messages",
            )
        get = item.get
        role, content, source = get("role"), get("content"), get("source")
        metadata, created_at, usage = get("metadata"), get("created_at"), get("usage")
    elif isinstance(item, MessageInput):
        role, content, source = item.role, item.content, item.source
        metadata, created_at, usage = item.metadata, item.created_at, item.usage
    else:
        raise InvalidInput(f"messages[{index}] must be an object.", field="messages")
    if role not in _ROLES:
        _refuse_choice(role, _ROLES, field="role", error=InvalidRole)
    if source is None:
        source = Message.Source.USER if role == Message.Role.USER else Message.Source.HOST
    if source not in _SOURCES:
        _refuse_choice(source, _SOURCES, field="source", error=InvalidSource)
    blocks = normalize_content(content)
    if metadata is None:  # the usual case: no need to check or encode ``{}``
        metadata, metadata_json = {}, "{}"
    else:
        metadata = _check_metadata(metadata)
        metadata_json = json_text(metadata, field="metadata")
    if isinstance(content, str):  # the one text block normalize_content made of it
        content_json = _TEXT_BLOCK_JSON % json_text(content, field="content")
    else:
        content_json = json_text(blocks, field="content")
    _check_size(utf8_size(content_json) + utf8_size(metadata_json))
    stamp = now
    if created_at is not None:
        if not isinstance(created_at, datetime):
            raise InvalidInput("created_at must be a datetime.", field="created_at")
        stamp = _CREATED_AT.get_prep_value(created_at)
        if stamp.tzinfo is not None:
            try:  # every database stores UTC: a year-1 time east of UTC would be year 0
                stamp.astimezone(UTC)
            except OverflowError:
                raise InvalidInput(
                    "created_at must lie between the years 1 and 9999 in UTC.",
                    field="created_at",
                ) from None
    usage_json = None
    if usage is not None:
        usage = check_usage(usage)
        usage_json = json_text(usage, field="usage")
    columns = {
        "role": role,
        "source": source,
        "content": blocks,
        "metadata": metadata,
        "created_at": stamp,
        "usage": usage,
        "token_count": count_tokens(role, blocks),
        "compacts_through_seq": None,
    }
    return _BuiltMessage(columns, content_json, metadata_json, created_at, usage_json)


#: The name the services modules import (:func:`build_message`).
_build_message = build_message


def build_blocks(role: str, blocks: list[dict[str, Any]], now: datetime) -> _BuiltMessage:
    """:func:`build_message` of ``{"role": role, "content": blocks}``, for content blocks a
    runtime adapter made (:func:`cortex_sessions.integrations.blocks.record_message`,
    docs/design.md §19.2, §19.3): what :func:`~cortex_sessions.content.normalize_content`
    checks of the list itself holds by construction, so only the content rule's walk
    (:func:`~cortex_sessions.content.check_json_value`), the encoding, the size and the
    token count run, as they run there. The blocks are stored as given (not copied).

    Args:
        role: the message's role (its source is the role's default).
        blocks: a non-empty list of fresh dicts, each with a non-empty string ``type``, at
            least one not a text block, a text block's ``text`` a string.
        now: the message's ``created_at``.

    Returns:
        The validated message, equal to :func:`build_message`'s of the same input.

    Raises:
        InvalidRole: ``role`` is not a role. NulCharacter, InvalidText, TooManyKeys,
            InvalidContent: the content rule refuses the blocks (docs/design.md §12.4).
        MessageTooLarge: over ``MAX_MESSAGE_BYTES``; and what ``TOKEN_COUNTER`` raises.
    """
    if role not in _ROLES:
        _refuse_choice(role, _ROLES, field="role", error=InvalidRole)
    check_json_value(blocks, field="content")
    content_json = json_text(blocks, field="content")
    _check_size(utf8_size(content_json) + 2)  # + len("{}"), the metadata's
    columns = {
        "role": role,
        "source": Message.Source.USER if role == Message.Role.USER else Message.Source.HOST,
        "content": blocks,
        "metadata": {},
        "created_at": now,
        "usage": None,
        "token_count": count_tokens(role, blocks),
        "compacts_through_seq": None,
    }
    return _BuiltMessage(columns, content_json, "{}", None, None)


def _check_size(size: int) -> None:
    """Refuse a message of ``size`` bytes of JSON (content and metadata) over
    ``MAX_MESSAGE_BYTES`` (docs/design.md §12.6) with :class:`MessageTooLarge`."""
    limit = app_settings.MAX_MESSAGE_BYTES
    if size > limit:
        raise MessageTooLarge(
            f"The message is {size} bytes of JSON; MAX_MESSAGE_BYTES is {limit}.",
            field="content",
            size=size,
            limit=limit,
        )


def check_message_count(count: int) -> None:
    """Refuse an append of more than ``MAX_MESSAGES_PER_APPEND`` messages (docs/design.md
    §12.6): one append is one transaction holding the session's row lock, so its size bounds
    how long every other write to the session waits.

    Args:
        count: the number of messages the append carries.

    Raises:
        TooManyMessages: ``count`` is over the setting (code ``too_many_messages``, field
            ``messages``).
    """
    limit = app_settings.MAX_MESSAGES_PER_APPEND
    if count > limit:
        raise TooManyMessages(
            f"The append carries {count} messages; at most {limit} are accepted in one "
            "(MAX_MESSAGES_PER_APPEND). Send them in several appends.",
            field="messages",
            size=count,
            limit=limit,
        )


def check_messages(messages: Sequence[MessageInput | Mapping[str, Any]]) -> None:
    """Validate messages by the rules of :func:`append_messages`, writing nothing and reading
    no database, and whatever their number: for a caller that splits a long list into
    appends of ``MAX_MESSAGES_PER_APPEND`` and wants bad input to write none of them
    (docs/design.md §12.6, §13.2).

    Args:
        messages: :class:`MessageInput` objects or mappings with the same keys.

    Raises:
        InvalidInput and its subclasses: as :func:`append_messages` raises them for bad input
            (``TooManyMessages`` excepted).
    """
    now = timezone.now()
    for index, item in enumerate(messages):
        _build_message(item, index, now)
