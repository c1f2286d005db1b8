"""Serializers of the API (docs/design.md §3, §7.3).

Output serializers render sessions and messages with the field names of docs/design.md §3. Input
serializers check only the *shape* of a request (types, lengths) and describe it in the schema;
the business rules (agent id characters, metadata being an object, content blocks, sizes, NUL
characters) are enforced by :mod:`cortex_sessions.services`, whose errors the exception handler
maps. Input serializers declare only writable fields, so a client sending ``id``, ``scope``,
``message_count``, ``last_message``, ``backfilled_by``, ``is_default``, ``created_at`` or
``updated_at`` changes nothing: those keys are ignored. Any other key the serializer does not
define is 400 ``unknown_field`` naming it, and no field converts a value of another JSON type
(docs/design.md §12.4): use the ``Strict*`` fields and :class:`StrictSerializerMixin` for new
input serializers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, cast

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import ErrorDetail
from rest_framework.fields import empty

from cortex_sessions.exceptions import NulCharacter
from cortex_sessions.models import Message, Session
from cortex_sessions.references.errors import InvalidReference

__all__ = [
    "AgentIdField",
    "ContentField",
    "CountSerializer",
    "EmptyBodySerializer",
    "ErrorSerializer",
    "ForkSerializer",
    "ListedMessageSerializer",
    "ListedSessionSerializer",
    "MessageAppendResultSerializer",
    "MessageInputSerializer",
    "MessagePageSerializer",
    "MessageSerializer",
    "MessageWithReferencesInputSerializer",
    "MessagesDeletedSerializer",
    "MetadataField",
    "PoppedMessageSerializer",
    "PreparedReferencesSerializer",
    "ReferenceCandidateListSerializer",
    "ReferenceCandidateSerializer",
    "ReferenceContextSerializer",
    "ReferencePrepareSerializer",
    "ReferencesField",
    "ResolveSerializer",
    "SearchMatchSerializer",
    "SessionCreateSerializer",
    "SessionMergePatchSerializer",
    "SessionSerializer",
    "SessionUpdateSerializer",
    "StrictBooleanField",
    "StrictCharField",
    "StrictChoiceField",
    "StrictFieldMixin",
    "StrictIntegerField",
    "StrictSerializerMixin",
    "StrictUUIDField",
    "refuse_body",
]

# -- strict input (docs/design.md §12.4) ----------------------------------------------------------

#: Schema patterns stating the server's rules, so a client generated from the schema sends
#: nothing the server refuses (docs/design.md §12.4). JSON Schema patterns are ECMA-262.
NO_NUL_PATTERN = r"^[^\u0000]*$"
#: The services' agent id rule: no control character, and not blank — by Python's ``str.strip``,
#: whose white space is not ECMA-262's ``\s`` (it has U+0085, and not U+FEFF), so it is spelt out.
_PY_SPACE = r"\u0000-\u0020\u007f\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
AGENT_ID_PATTERN = rf"^[^\u0000-\u001f\u007f]*[^{_PY_SPACE}][^\u0000-\u001f\u007f]*$"
#: Python's white space exactly (``str.isspace``), for text whose other control characters
#: count as content.
_PY_WHITESPACE = (
    r"\u0009-\u000d\u001c-\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
)
#: Text that is not blank (by Python's ``str.strip``) and holds no NUL: a message's string
#: content, which an empty or blank one is 400 ``empty_content``.
NOT_BLANK_PATTERN = rf"^[^\u0000]*[^\u0000{_PY_WHITESPACE}][^\u0000]*$"
_SCOPE_LEVEL = r"[a-z][a-z0-9_.-]{0,63}=(?:[^%/=\u0000-\u001f\u007f-\u009f]|%25|%2F|%3D){1,255}"
#: A canonical scope of 1 to 3 levels (the default ``MAX_SCOPE_DEPTH``), docs/design.md §2.2.
SCOPE_PATTERN = rf"^{_SCOPE_LEVEL}(?:/{_SCOPE_LEVEL}){{0,2}}$"

#: Codes a field keeps whatever its rule code: a missing field (one rule for every field) and a
#: NUL character in text (one rule for every string of a body).
_KEPT_CODES = frozenset({"required", "nul_character", "null_characters_not_allowed"})


class StrictFieldMixin:
    """One code per rule (docs/design.md §12.4): a field with a rule of its own answers that
    rule's code for every failure.

    DRF's generic codes are renamed to the app's for every field in one place
    (:data:`cortex_sessions.api.exceptions.SAME_AS_APP_CODE`: ``max_length`` → ``too_long``,
    ``null`` → ``invalid``, …); this mixin only adds the field's own rule.

    Attributes:
        rule_code: when set, the code of every failure of the field (except ``required`` and
            NUL), e.g. ``invalid_agent_id`` whether the agent id is blank, too long, not a
            string or holds a control character, or ``invalid_metadata`` whether the metadata
            is ``null`` or not an object.
    """

    rule_code: str | None = None

    def __init__(self, *args: Any, rule_code: str | None = None, **kwargs: Any) -> None:
        if rule_code is not None:
            self.rule_code = rule_code
        super().__init__(*args, **kwargs)

    def _recode(self, code: str | None) -> str:
        code = code or "invalid"
        if code in _KEPT_CODES or self.rule_code is None:
            return code
        return self.rule_code

    def run_validation(self, data: Any = empty) -> Any:
        """DRF's validation, with each error's code replaced as the class says."""
        try:
            return super().run_validation(data)  # type: ignore[misc]
        except serializers.ValidationError as exc:
            details = exc.detail if isinstance(exc.detail, list) else [exc.detail]
            raise serializers.ValidationError(
                [
                    ErrorDetail(str(item), code=self._recode(getattr(item, "code", None)))
                    for item in details
                ]
            ) from None


class StrictCharField(StrictFieldMixin, serializers.CharField):
    """A string field that takes only a JSON string: no number-to-string coercion (DRF's
    ``CharField`` turns ``5`` into ``"5"``); over ``max_length`` is ``too_long`` (renamed by
    the exception handler)."""

    def to_internal_value(self, data: Any) -> str:
        """``data`` unchanged if it is a ``str``; else 400 ``invalid``."""
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


@extend_schema_field(
    {"type": "string", "minLength": 1, "maxLength": 255, "pattern": AGENT_ID_PATTERN}
)
class AgentIdField(StrictCharField):
    """``agent_id``: every way of breaking it is ``invalid_agent_id`` (docs/design.md §12.4)."""

    rule_code = "invalid_agent_id"

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", 255)
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)


@extend_schema_field({"type": "string", "maxLength": 500, "pattern": NO_NUL_PATTERN})
class TitleField(StrictCharField):
    """A session title: at most 500 characters (``too_long``), no NUL (``nul_character``)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", 500)
        kwargs.setdefault("allow_blank", True)
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)


@extend_schema_field({"type": "string", "nullable": True, "pattern": NO_NUL_PATTERN})
class CwdField(StrictCharField):
    """A working directory: a string without NUL, or ``null``."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("allow_null", True)
        kwargs.setdefault("allow_blank", True)
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)


@extend_schema_field({"type": "string", "maxLength": 1024, "pattern": SCOPE_PATTERN})
class ScopeTextField(StrictCharField):
    """A canonical scope string; every bad one is ``invalid_scope``."""

    rule_code = "invalid_scope"

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", 1024)
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)


class StrictBooleanField(StrictFieldMixin, serializers.BooleanField):
    """A boolean that takes only JSON ``true`` or ``false`` (DRF's also takes ``"yes"``, ``1``…)."""

    def to_internal_value(self, data: Any) -> bool:
        """``data`` if it is ``True`` or ``False``; else 400 ``invalid``."""
        if data is True or data is False:
            return data
        self.fail("invalid", input=data)
        raise AssertionError("unreachable")  # pragma: no cover


class StrictIntegerField(StrictFieldMixin, serializers.IntegerField):
    """An integer that takes only a JSON integer (DRF's also takes ``"5"`` and ``5.0``)."""

    def to_internal_value(self, data: Any) -> int:
        """``data`` if it is an ``int`` (not a ``bool``) within the bounds; else 400."""
        if not isinstance(data, int) or isinstance(data, bool):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictUUIDField(StrictFieldMixin, serializers.UUIDField):
    """A UUID given as a JSON string only (DRF's also takes an integer)."""

    def to_internal_value(self, data: Any) -> Any:
        """The UUID of a ``str``; anything else is 400 ``invalid``."""
        if not isinstance(data, str):
            self.fail("invalid", value=data)
        return super().to_internal_value(data)


class StrictChoiceField(StrictFieldMixin, serializers.ChoiceField):
    """A choice given as a JSON string only; pass ``rule_code`` (``invalid_role``, …)."""

    def to_internal_value(self, data: Any) -> Any:
        """``data`` if it is one of the choices; else 400 with the field's rule code, or
        ``nul_character`` for a string holding NUL, as in every other string of a body."""
        if not isinstance(data, str):
            self.fail("invalid_choice", input=data)
        if "\x00" in data:
            raise serializers.ValidationError(NulCharacter.default_message, code=NulCharacter.code)
        return super().to_internal_value(data)


class StrictSerializerMixin:
    """A body field the serializer does not define is a 400 naming it (docs/design.md §12.4).

    Each unknown key gets an error ``{"code": "unknown_field"}`` under its own name, together
    with the other field errors. Keys in ``ignored_fields`` (the read-only fields of
    docs/design.md §7.3, which a client may send back as it read them) are accepted and ignored.
    """

    #: Keys accepted and ignored.
    ignored_fields: frozenset[str] = frozenset()

    def to_internal_value(self, data: Any) -> Any:
        """DRF's validation plus the unknown-key check; all errors are reported together."""
        unknown: dict[str, list[ErrorDetail]] = {}
        if isinstance(data, Mapping):
            known = set(self.fields) | self.ignored_fields  # type: ignore[attr-defined]
            unknown = {
                str(key): [ErrorDetail("Unknown field.", code="unknown_field")]
                for key in data
                if key not in known
            }
        try:
            value = super().to_internal_value(data)  # type: ignore[misc]
        except serializers.ValidationError as exc:
            if unknown and isinstance(exc.detail, dict):
                raise serializers.ValidationError({**exc.detail, **unknown}) from None
            raise
        if unknown:
            raise serializers.ValidationError(unknown)
        return value


#: Fields of a session that only the app writes (docs/design.md §7.3); a body may carry them.
SESSION_READ_ONLY_FIELDS = frozenset(
    {
        "id",
        "scope",
        "agent_id",
        "is_default",
        "message_count",
        "last_message",
        "backfilled_by",
        "created_at",
        "updated_at",
        "archived_at",
        "forked_from",
        "forked_at_seq",
        "match",  # of a search result (docs/design.md §11.5)
    }
)
#: Fields of a stored message that only the app writes; a message sent back may carry them.
MESSAGE_READ_ONLY_FIELDS = frozenset({"id", "session", "seq", "created_at", "match"})

_BLOCK_SCHEMA = {
    "type": "object",
    "description": (
        "A content block: {'type': 'text', 'text': ...} or any other type, kept as given."
    ),
    "properties": {
        "type": {"type": "string", "minLength": 1, "pattern": NO_NUL_PATTERN},
        "text": {"type": "string", "pattern": NO_NUL_PATTERN},
    },
    "required": ["type"],
    "additionalProperties": True,
}


@extend_schema_field({"type": "object", "additionalProperties": True})
class MetadataField(StrictFieldMixin, serializers.JSONField):
    """Host-owned JSON object: ``null`` here and anything but an object in the service are
    ``invalid_metadata`` (one rule, one code)."""

    rule_code = "invalid_metadata"


@extend_schema_field(
    {
        "oneOf": [
            {
                "type": "string",
                "minLength": 1,
                "pattern": NOT_BLANK_PATTERN,
                "description": "Becomes one text block; not blank.",
            },
            {"type": "array", "items": _BLOCK_SCHEMA, "minItems": 1},
        ]
    }
)
class ContentField(StrictFieldMixin, serializers.JSONField):
    """Message content on input: a string or a list of content blocks (docs/design.md §3.2);
    ``null`` here and any other shape in the service are ``invalid_content``."""

    rule_code = "invalid_content"


@extend_schema_field({"type": "array", "items": _BLOCK_SCHEMA})
class BlocksField(serializers.JSONField):
    """Message content on output: the stored list of content blocks."""


@extend_schema_field(
    {
        "type": "array",
        "description": (
            "Sessions to reference, in the order the user selected them; mentions found in the "
            "content's text blocks follow them. Duplicates are dropped (the first wins); at "
            "most MAX_REFERENCES distinct sessions (hard maximum 3)."
        ),
        "items": {
            "type": "object",
            "properties": {
                "session_id": {
                    "type": "string",
                    "format": "uuid",
                    "description": (
                        "The referenced session's id (authoritative); one that is not a UUID is "
                        "SESSION_REFERENCE_INVALID_REFERENCE."
                    ),
                },
                "label": {
                    "type": "string",
                    "nullable": True,
                    "pattern": NO_NUL_PATTERN,
                    "description": "Display label; default the id.",
                },
            },
            "required": ["session_id"],
            "additionalProperties": False,
        },
    }
)
class ReferencesField(StrictFieldMixin, serializers.JSONField):
    """Explicit session references ``[{"session_id", "label"?}, ...]`` (docs/design.md §8.3).

    Only the JSON is taken here; the reference service checks the shape and answers
    ``SESSION_REFERENCE_INVALID_REFERENCE`` for a malformed item, as the Python API does, and
    so does this field for ``null``.
    """

    rule_code = InvalidReference.code


class SessionSerializer(serializers.ModelSerializer[Session]):
    """A session as the API returns it (docs/design.md §3.1). Every field is read-only here."""

    metadata = MetadataField(read_only=True)

    class Meta:
        model = Session
        fields = [
            "id",
            "agent_id",
            "scope",
            "title",
            "metadata",
            "cwd",
            "message_count",
            "last_message",
            "is_default",
            "backfilled_by",
            "created_at",
            "updated_at",
            "archived_at",
            "forked_from",
            "forked_at_seq",
        ]
        read_only_fields = fields


class SearchMatchSerializer(serializers.Serializer[Any]):
    """Why a result matched ``q`` (docs/design.md §11.5): ``{snippet, seq, rank}``."""

    snippet = serializers.CharField(
        read_only=True,
        help_text=(
            "A short passage of the best-matching text, HTML-escaped, each hit wrapped in "
            "<mark>…</mark> (the only markup it holds): safe to insert as HTML."
        ),
    )
    seq = serializers.IntegerField(
        read_only=True,
        allow_null=True,
        help_text="The seq of the message the snippet comes from; null for a title match.",
    )
    rank = serializers.FloatField(
        read_only=True,
        allow_null=True,
        help_text="Relevance, higher is better (PostgreSQL ts_rank); null on SQLite.",
    )


class SearchResultMixin:
    """Adds ``match`` to a serialized row read with ``q`` and leaves it out otherwise, so a
    row has one shape wherever it is returned unless it is a search result. The schema lists
    ``match`` as optional (:attr:`optional_fields`, read by ``CortexAutoSchema``)."""

    #: Response fields that may be absent.
    optional_fields = ("match",)

    def to_representation(self, instance: Any) -> Any:
        """The row, with ``match`` only when it has one."""
        data = super().to_representation(instance)  # type: ignore[misc]
        if data.get("match") is None:
            data.pop("match", None)
        return data


class ListedSessionSerializer(SearchResultMixin, SessionSerializer):
    """A session in a list: the session, and ``match`` when the list was a search."""

    match = SearchMatchSerializer(
        source="search_match",
        read_only=True,
        help_text="Only with q: why the session matched (its best message, or its title).",
    )

    class Meta(SessionSerializer.Meta):
        fields = [*SessionSerializer.Meta.fields, "match"]
        read_only_fields = fields


class SessionCreateSerializer(StrictSerializerMixin, serializers.Serializer[Any]):
    """Body of ``POST /sessions/``: the host-owned fields, the agent and an optional scope."""

    ignored_fields = SESSION_READ_ONLY_FIELDS - {"agent_id", "scope"}

    agent_id = AgentIdField()
    title = TitleField(required=False, default="")
    metadata = MetadataField(required=False, default=dict)
    cwd = CwdField(required=False, default=None)
    scope = ScopeTextField(
        required=False,
        help_text=(
            "Canonical scope to create the session at; at or beneath the request's scope. "
            "Default: the request's scope."
        ),
    )


class SessionUpdateSerializer(StrictSerializerMixin, serializers.Serializer[Any]):
    """Body of ``PUT``/``PATCH /sessions/{id}/``: only ``title``, ``metadata`` and ``cwd``.

    Fields left out are not changed, with ``PUT`` as with ``PATCH``. The other fields of a
    session as read (``id``, ``agent_id``, ``scope``, counters, …) are accepted and ignored, so
    a client may send back what it read; any other key is 400 ``unknown_field``.
    """

    ignored_fields = SESSION_READ_ONLY_FIELDS

    title = TitleField(required=False)
    metadata = MetadataField(required=False)
    cwd = CwdField(required=False)


@extend_schema_field({"type": "object", "additionalProperties": True, "nullable": True})
class MetadataPatchField(serializers.JSONField):
    """The ``metadata`` member of a merge patch: an object merged by RFC 7386, or ``null``."""


class SessionMergePatchSerializer(StrictSerializerMixin, serializers.Serializer[Any]):
    """Body of ``PATCH /sessions/{id}/`` sent as ``application/merge-patch+json`` (§11.3).

    ``title`` and ``cwd`` are replaced when present; ``metadata`` is merged into the stored
    object by RFC 7386 (a ``null`` member deletes that key; ``"metadata": null`` empties it).
    Read-only fields are accepted and ignored; any other key is 400 ``unknown_field``.
    """

    ignored_fields = SESSION_READ_ONLY_FIELDS

    title = TitleField(required=False)
    metadata = MetadataPatchField(required=False, allow_null=True)
    cwd = CwdField(required=False)


@extend_schema_field({"type": "integer", "minimum": 0, "maximum": 2**63 - 1})
class UpToSeqField(StrictFieldMixin, serializers.JSONField):
    """A fork point; the service checks it is a JSON integer from 0 to the source's last seq.
    Every bad value is 400 ``invalid_up_to_seq``, ``null`` included (it is not an integer;
    leave the field out to copy everything)."""

    rule_code = "invalid_up_to_seq"


class ForkSerializer(StrictSerializerMixin, serializers.Serializer[Any]):
    """Body of ``POST /sessions/{id}/fork/`` (docs/design.md §11.1); every field optional, any
    other key is 400 ``unknown_field``. ``title`` and ``metadata`` follow the rules they have
    in ``POST /sessions/`` (``null`` is ``invalid`` and ``invalid_metadata``); left out, they
    are the source's."""

    up_to_seq = UpToSeqField(
        required=False,
        help_text=(
            "Copy the messages with seq up to this value (0 to the source's last seq); default all."
        ),
    )
    title = TitleField(required=False, help_text="Default: the source's title.")
    metadata = MetadataField(required=False, help_text="Default: the source's metadata.")


class ResolveSerializer(StrictSerializerMixin, serializers.Serializer[Any]):
    """Body of ``POST /sessions/resolve/`` (docs/design.md §6.1)."""

    agent_id = AgentIdField()
    session_id = StrictUUIDField(
        required=False,
        allow_null=True,
        help_text="Use this session (it must be the agent's and in scope) instead of the default.",
    )


class CountSerializer(serializers.Serializer[Any]):
    """Response of ``GET /sessions/count/``."""

    count = serializers.IntegerField(min_value=0)


class MessageSerializer(serializers.ModelSerializer[Message]):
    """A stored message (docs/design.md §3.2)."""

    session = serializers.UUIDField(source="session_id", read_only=True, allow_null=True)
    content = BlocksField(read_only=True)
    metadata = MetadataField(read_only=True)

    class Meta:
        model = Message
        fields = ["id", "session", "seq", "role", "source", "content", "metadata", "created_at"]
        read_only_fields = fields


class ListedMessageSerializer(SearchResultMixin, MessageSerializer):
    """A message in a page: the message, and ``match`` when the page was a search."""

    match = SearchMatchSerializer(
        source="search_match",
        read_only=True,
        help_text="Only with q: why the message matched.",
    )

    class Meta(MessageSerializer.Meta):
        fields = [*MessageSerializer.Meta.fields, "match"]
        read_only_fields = fields


#: The sources a client may send: every one but ``session-reference``, which only the app
#: writes (docs/design.md §8.8).
INPUT_SOURCES = [
    value for value in Message.Source.values if value != Message.Source.SESSION_REFERENCE
]


# The enum sits inside ``allOf`` so that drf-spectacular does not make it a component: a
# second choice set under the name ``source`` (next to the messages' ``SourceEnum``) would be a
# naming collision warning for every host.
@extend_schema_field({"allOf": [{"type": "string", "enum": INPUT_SOURCES}]})
class InputSourceField(StrictChoiceField):
    """A message's ``source`` on input: ``session-reference`` is ``invalid_source`` like any
    other value outside :data:`INPUT_SOURCES`, and the schema's enum leaves it out."""

    def to_internal_value(self, data: Any) -> Any:
        """``data`` if it is a source a client may send; else 400 ``invalid_source``."""
        if data == Message.Source.SESSION_REFERENCE:
            raise serializers.ValidationError(
                "session-reference messages are written by the app (resolve_references).",
                code="invalid_source",
            )
        return super().to_internal_value(data)


class MessageInputSerializer(StrictSerializerMixin, serializers.Serializer[Any]):
    """One message in ``POST /sessions/{id}/messages/`` (docs/design.md §7.3)."""

    ignored_fields = MESSAGE_READ_ONLY_FIELDS

    role = StrictChoiceField(choices=Message.Role.choices, rule_code="invalid_role")
    content = ContentField()
    source = InputSourceField(  # type: ignore[assignment]  # a field named like a Field attribute
        choices=Message.Source.choices,
        rule_code="invalid_source",
        required=False,
        help_text=(
            "Default: 'user' for the user role, 'host' for the others. 'session-reference' "
            "messages are written by the app only (resolve_references), never sent."
        ),
    )
    metadata = MetadataField(required=False)


class MessageWithReferencesInputSerializer(MessageInputSerializer):
    """A single message in ``POST /sessions/{id}/messages/``, which may resolve session
    references (docs/design.md §8.8).

    With ``resolve_references`` the message must have role ``user`` (and source ``user`` or
    none): its mentions are parsed, the references prepared, and the readable message and its
    context message are stored in one transaction.
    """

    resolve_references = StrictBooleanField(
        required=False,
        default=False,
        help_text=(
            "Parse the session mentions in the content, prepare the referenced sessions and "
            "store the readable message followed by its session-reference context message. "
            "Only on a single message with role 'user'."
        ),
    )
    references = ReferencesField(
        required=False,
        help_text="Explicit references; only together with resolve_references: true.",
    )


class ReferencePrepareSerializer(StrictSerializerMixin, serializers.Serializer[Any]):
    """Body of ``POST /sessions/{id}/references/prepare/`` (docs/design.md §8.8)."""

    content = ContentField(
        help_text="The user message: a string or content blocks; mentions in text blocks count."
    )
    references = ReferencesField(required=False)


class ReferenceCandidateSerializer(serializers.Serializer[Any]):
    """A session the user may mention, for the mention picker (docs/design.md §8.4)."""

    session_id = serializers.CharField()
    label = serializers.CharField(help_text="The session's title, or its id when untitled.")  # type: ignore[assignment]  # a field named like a Field attribute
    cwd = serializers.CharField(allow_null=True, allow_blank=True)
    created_at = serializers.IntegerField(help_text="Creation time in Unix epoch milliseconds.")
    same_workspace = serializers.BooleanField(
        help_text="Same cwd as the current session (ranked first)."
    )
    mention = serializers.CharField(
        help_text="Ready-made mention token, @[label](cortex-session:...)."
    )


class ReferenceCandidateListSerializer(serializers.Serializer[Any]):
    """Response of ``GET /sessions/{id}/reference-candidates/``: the candidates in rank order
    (same cwd, then no cwd, then the rest; newest first within a rank)."""

    results = ReferenceCandidateSerializer(many=True)


def constant_field(value: str, **kwargs: Any) -> serializers.Field[Any, Any, Any, Any]:
    """A read-only string field that always holds ``value``, described as a one-value string
    pattern (an enum would become a named component whose ``role`` collides with messages')."""
    field_class = type("ConstantField", (serializers.CharField,), {})
    schema = {"type": "string", "pattern": f"^{re.escape(value)}$"}
    field = extend_schema_field(schema)(field_class)(read_only=True, **kwargs)
    return cast(serializers.Field[Any, Any, Any, Any], field)


class ReferenceSourceItemSerializer(serializers.Serializer[Any]):
    """One reference in a context's ``source`` record, with its retention stats (docs/design.md §8.7)."""

    session_id = serializers.CharField()
    label = serializers.CharField(allow_blank=True)  # type: ignore[assignment]  # a field named like a Field attribute
    captured_through_seq = serializers.IntegerField(min_value=0)
    input_index = serializers.IntegerField(min_value=0)
    compacted = serializers.BooleanField()
    original_messages = serializers.IntegerField(min_value=0)
    retained_messages = serializers.IntegerField(min_value=0)
    omitted_messages = serializers.IntegerField(min_value=0)
    omitted_bytes = serializers.IntegerField(min_value=0)
    truncated = serializers.BooleanField()


class ReferenceSourceSerializer(serializers.Serializer[Any]):
    """The ``source`` record of a reference context (docs/design.md §8.7)."""

    kind = constant_field("session-reference")
    form = constant_field("recall")
    version = serializers.IntegerField()
    references = ReferenceSourceItemSerializer(many=True)


class ReferenceContextSerializer(serializers.Serializer[Any]):
    """The aggregated, untrusted context of a referencing message (docs/design.md §8.7)."""

    role = constant_field("user")
    source = ReferenceSourceSerializer()  # type: ignore[assignment]  # a field named like a Field attribute
    content = BlocksField(
        help_text="One text block: the untrusted-data preamble and the snapshots as JSON "
        "inside <referenced-sessions> tags."
    )


class PreparedReferencesSerializer(serializers.Serializer[Any]):
    """Response of ``POST /sessions/{id}/references/prepare/``: the readable content and zero
    or one context (docs/design.md §8.8)."""

    content = BlocksField(help_text="The message content with mention tokens made readable.")
    contexts = ReferenceContextSerializer(
        many=True, help_text="Empty without references, else exactly one context."
    )


class MessageAppendResultSerializer(serializers.Serializer[Any]):
    """Response of ``POST /sessions/{id}/messages/``: the stored rows and the session's new
    counters."""

    session = SessionSerializer()
    messages = MessageSerializer(many=True)


class MessagesDeletedSerializer(serializers.Serializer[Any]):
    """Response of the message deletes (docs/design.md §11.4): the session's new counters and
    how many messages went."""

    session = SessionSerializer()
    deleted = serializers.IntegerField(min_value=0)


class PoppedMessageSerializer(serializers.Serializer[Any]):
    """Response of ``POST /sessions/{id}/messages/pop/`` (docs/design.md §11.4): the removed
    message and the session's new counters."""

    session = SessionSerializer()
    message = MessageSerializer()


class MessagePageSerializer(serializers.Serializer[Any]):
    """Response of ``GET /sessions/{id}/messages/``: one page, chronological (by ``seq``)."""

    results = ListedMessageSerializer(many=True)
    has_more = serializers.BooleanField(
        help_text="More messages lie beyond this page in the reading direction."
    )
    next = serializers.URLField(
        allow_null=True,
        help_text=(
            "The following page: older messages when reading newest-first (no parameter or "
            "before_seq), newer ones when reading forward with after_seq alone; null at the end."
        ),
    )


class ErrorItemSerializer(serializers.Serializer[Any]):
    """One field error."""

    code = serializers.CharField()
    detail = serializers.CharField()


class ErrorSerializer(serializers.Serializer[Any]):
    """Body of every error response (docs/design.md §7.3)."""

    code = serializers.CharField(help_text="Stable machine-readable code; branch on this.")
    detail = serializers.CharField(help_text="Human-readable explanation; may change.")
    errors = serializers.DictField(  # type: ignore[assignment]  # a field named like a Field attribute
        child=ErrorItemSerializer(many=True),
        required=False,
        help_text="Validation errors by field (nested fields as dotted paths).",
    )


def message_list_data(data: Any) -> tuple[list[dict[str, Any]], Any]:
    """Validate a message-append body: one message object or a non-empty list of them.

    Returns:
        ``(validated messages, serializer)``.

    Raises:
        rest_framework.exceptions.ValidationError: a shape error (400 ``invalid``).
    """
    many = isinstance(data, list)
    serializer = (
        MessageInputSerializer(data=data, many=many, allow_empty=False)
        if many
        else (MessageInputSerializer(data=data))
    )
    serializer.is_valid(raise_exception=True)
    validated = serializer.validated_data
    return (list(validated) if many else [validated]), serializer


class EmptyBodySerializer(StrictSerializerMixin, serializers.Serializer[Any]):
    """The body of an action that takes none (make-default, archive, unarchive, pop): nothing
    or ``{}``; any key is 400 ``unknown_field`` naming it, as on every other endpoint
    (docs/design.md §12.4)."""


def refuse_body(request: Any) -> None:
    """Refuse a body with fields on an endpoint that defines none.

    Args:
        request: the DRF request; an absent body reads as ``{}``.

    Raises:
        rest_framework.exceptions.ValidationError: a key in the body (``unknown_field`` under
            its name) or a body that is not an object (``invalid``).
    """
    data = request.data
    if not data and not isinstance(data, (list, str)):
        return
    EmptyBodySerializer(data=data).is_valid(raise_exception=True)
