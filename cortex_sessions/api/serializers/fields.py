"""Fields of the API's serializers (docs/design.md §12.4): the schema patterns stating the
server's rules, the strict fields that take only their own JSON type and answer one code per
rule, and the JSON-valued fields (metadata, message content, session references)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import ErrorDetail
from rest_framework.fields import empty

from cortex_sessions.exceptions import NulCharacter
from cortex_sessions.references.errors import InvalidReference

__all__ = [
    "AGENT_ID_PATTERN",
    "NOT_BLANK_PATTERN",
    "NO_NUL_PATTERN",
    "SCOPE_PATTERN",
    "AgentIdField",
    "BlocksField",
    "ContentField",
    "CostField",
    "CwdField",
    "MetadataField",
    "ReferencesField",
    "ScopeTextField",
    "StrictBooleanField",
    "StrictCharField",
    "StrictChoiceField",
    "StrictFieldMixin",
    "StrictIntegerField",
    "StrictUUIDField",
    "TitleField",
    "UsageField",
]

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


@extend_schema_field(
    {
        "type": "object",
        "nullable": True,
        "description": (
            "What producing the message cost (docs/design.md §16.1): any of these keys, no "
            "other; adds to the session's input_tokens, output_tokens and cost."
        ),
        "properties": {
            **{
                key: {"type": "integer", "minimum": 0, "maximum": 10**12}
                for key in (
                    "input_tokens",
                    "output_tokens",
                    "cached_input_tokens",
                    "reasoning_tokens",
                )
            },
            "model": {"type": "string", "maxLength": 255, "pattern": NO_NUL_PATTERN},
            "cost": {
                "type": "string",
                "pattern": r"^(0|[1-9][0-9]{0,9})(\.[0-9]{1,6})?$",
                "description": (
                    "A non-negative decimal below 10^10 as a string, at most 6 fractional digits."
                ),
                "example": "0.0042",
            },
        },
        "additionalProperties": False,
    }
)
class UsageField(StrictFieldMixin, serializers.JSONField):
    """A message's ``usage`` (docs/design.md §16.1): ``null`` or an object; the service checks
    its keys and values, and any bad shape is ``invalid_usage`` (one rule, one code)."""

    rule_code = "invalid_usage"


@extend_schema_field(
    {
        "type": "string",
        "format": "decimal",
        "pattern": r"^[0-9]{1,14}\.[0-9]{6}$",
        "example": "0.004200",
    }
)
class CostField(serializers.DecimalField):
    """A session's ``cost`` (docs/design.md §16.1): the sum of its messages' ``usage.cost``,
    read-only, as a string with six fractional digits."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_digits", 20)
        kwargs.setdefault("decimal_places", 6)
        kwargs.setdefault("read_only", True)
        super().__init__(**kwargs)


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
