"""Query parameters of the session list and count (docs/design.md §7.2), as an explicit ``FilterSet``.

The FilterSet is the HTTP contract — it parses and validates ``agent_id``, ``exact``,
``default_only``, ``search``, ``ordering``, ``archived``, ``metadata`` and ``q`` and describes them in the OpenAPI schema — while
the query itself is built by :func:`cortex_sessions.services.session_queryset`, where the rules
live (scope matching, literal ``%``/``_`` in ``search``, stable ordering with an id tie-break).
A bad value is a 400 ``invalid_filter`` listing the parameter, never silently ignored.
"""

from __future__ import annotations

from collections import OrderedDict
from functools import cached_property
from typing import Any, TypeVar, cast

import django_filters
from django import forms
from django.core.exceptions import ValidationError
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import extend_schema_field
from rest_framework.exceptions import ErrorDetail

from cortex_sessions import services
from cortex_sessions.content import parse_json
from cortex_sessions.exceptions import InvalidAgentId, InvalidFilter, InvalidText, NulCharacter
from cortex_sessions.metadata import MAX_METADATA_FILTER_KEYS, check_metadata_filter
from cortex_sessions.models import Session
from cortex_sessions.search import BLANK, MAX_QUERY_CHARS, QUERY_PATTERN
from cortex_sessions.search_limits import MAX_QUERY_WORDS, query_words, too_many_words_message

from .exceptions import InvalidQuery
from .serializers import AGENT_ID_PATTERN

__all__ = [
    "EMPTY_VALUE_MESSAGE",
    "SEARCH_QUERY_HELP",
    "SEARCH_QUERY_SCHEMA",
    "SessionFilter",
    "SessionFilterBackend",
    "StrictBooleanField",
    "parse_search_query",
    "text_param",
]

#: The detail of a query parameter given an empty value where one is required.
EMPTY_VALUE_MESSAGE = "An empty value is not a filter; leave the parameter out."

ORDERING_CHOICES = [
    (value, value) for field in services.ORDERING_FIELDS for value in (field, f"-{field}")
]


class StrictBooleanField(forms.Field):
    """A boolean query parameter: ``true``/``false``/``1``/``0`` (any case); anything else is
    an error (Django's ``NullBooleanField`` would quietly read ``maybe`` as "not given")."""

    TRUE = frozenset({"true", "1"})
    FALSE = frozenset({"false", "0"})

    def to_python(self, value: Any) -> bool | None:
        """Parse the raw value.

        Raises:
            ValidationError: a value other than true/false/1/0 (code ``invalid``).
        """
        if value in (None, ""):
            return None
        if isinstance(value, bool):
            return value
        text = str(value).lower()
        if text in self.TRUE:
            return True
        if text in self.FALSE:
            return False
        raise ValidationError("Use true or false.", code="invalid")


class StrictBooleanFilter(django_filters.BooleanFilter):
    """A ``BooleanFilter`` parsed by :class:`StrictBooleanField`."""

    field_class = StrictBooleanField  # type: ignore[assignment]  # not a NullBooleanField


class TextField(forms.CharField):
    """A text query parameter refusing NUL characters (no database stores them); over
    ``max_length`` is ``too_long`` (Django's ``max_length``, renamed by the exception handler)."""

    def to_python(self, value: Any) -> str:
        """Return the text unchanged (not stripped).

        Raises:
            ValidationError: the value contains ``\\x00`` (code ``nul_character``).
        """
        text = super().to_python(value)
        if text is None:  # only with empty_value=None, which these filters never set
            return ""
        if "\x00" in text:
            raise ValidationError("NUL characters are not allowed.", code="nul_character")
        return text


class TextFilter(django_filters.CharFilter):
    """A ``CharFilter`` parsed by :class:`TextField`."""

    field_class = TextField


class SearchQueryField(TextField):
    """The ``q`` query parameter of message search (docs/design.md §11.5)."""

    def to_python(self, value: Any) -> str:
        """Return the query unchanged.

        Raises:
            ValidationError: NUL (``nul_character``), over ``MAX_QUERY_CHARS`` characters or
                ``MAX_QUERY_WORDS`` words (``too_long``), or only spaces, tabs and line breaks
                (``invalid``).
        """
        text = super().to_python(value)
        if len(text) > MAX_QUERY_CHARS:
            raise ValidationError(
                f"q is {len(text)} characters; at most {MAX_QUERY_CHARS} are allowed.",
                code="too_long",
            )
        if query_words(text) > MAX_QUERY_WORDS:
            raise ValidationError(too_many_words_message(text), code="too_long")
        if text and not text.strip(BLANK):
            raise ValidationError(
                "q must hold something besides spaces, tabs and line breaks.", code="invalid"
            )
        return text


class SearchQueryFilter(django_filters.CharFilter):
    """A ``CharFilter`` parsed by :class:`SearchQueryField`."""

    field_class = SearchQueryField


#: The OpenAPI schema of ``q`` (the rules of :class:`SearchQueryField`).
SEARCH_QUERY_SCHEMA = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_QUERY_CHARS,
    "pattern": QUERY_PATTERN,
}

#: The OpenAPI description of ``q``.
SEARCH_QUERY_HELP = (
    "Message search (docs/search.md): only what matches in conversation messages "
    "(user and assistant turns, checkpoint summaries; never tool output, system prompts or "
    "reference snapshots)"
)


def parse_search_query(request: Any) -> str | None:
    """The ``q`` query parameter of a request, checked as :class:`SearchQueryField` does.

    Returns:
        The query, or ``None`` when the parameter is absent.

    Raises:
        InvalidQuery: empty (an empty value is not a filter), NUL, too long (characters or
            words) or blank (400 ``invalid_filter``, the rule's code under ``q``).
    """
    if "q" not in request.query_params:
        return None
    raw = request.query_params["q"]
    try:
        if raw == "":
            raise ValidationError(EMPTY_VALUE_MESSAGE, code="invalid")
        return cast(str, SearchQueryField(required=False, strip=False).clean(raw))
    except ValidationError as exc:
        raise InvalidQuery(
            {"q": [ErrorDetail(str(message), code=exc.code or "invalid") for message in exc]}
        ) from None


class AgentIdField(TextField):
    """The ``agent_id`` query parameter, under the services' rule for an agent id
    (:func:`cortex_sessions.services.check_agent_id`): every bad one — empty, blank, over 255
    characters, with a control character — is ``invalid_agent_id``, as in a body
    (docs/design.md §12.4); a NUL is ``nul_character``, as everywhere."""

    #: The code of every refusal (the empty-value check reads it too).
    rule_code = InvalidAgentId.code

    def to_python(self, value: Any) -> str:
        """The agent id, unchanged.

        Raises:
            ValidationError: a NUL (``nul_character``) or a bad agent id (``invalid_agent_id``).
        """
        text = super().to_python(value)
        if text:
            try:
                services.check_agent_id(text)
            except InvalidAgentId as exc:
                raise ValidationError(exc.message, code=exc.code) from None
        return text


class AgentIdFilter(django_filters.CharFilter):
    """A ``CharFilter`` parsed by :class:`AgentIdField`."""

    field_class = AgentIdField


def text_param(request: Any, name: str, *, max_length: int) -> str:
    """Read a free-text query parameter outside a filterset (``q``) under the rule of
    :class:`TextField`: no NUL (``nul_character``), at most ``max_length`` characters
    (``too_long``).

    Returns:
        The text, unchanged; ``""`` when absent.

    Raises:
        InvalidQuery: the value breaks the rule.
    """
    field = TextField(max_length=max_length, required=False, strip=False)
    try:
        return cast(str, field.clean(request.query_params.get(name, "")))
    except ValidationError as exc:
        raise InvalidQuery(
            {
                name: [
                    ErrorDetail(message, code=error.code)
                    for error in exc.error_list
                    for message in error.messages
                ]
            }
        ) from None


#: Values of the ``archived`` parameter and what the service takes for each (§11.2).
ARCHIVED_CHOICES = {"false": False, "true": True, "any": None}


class MetadataFilterField(forms.CharField):
    """The ``metadata`` query parameter: a JSON object (docs/design.md §11.3)."""

    def to_python(self, value: Any) -> dict[str, Any] | None:  # type: ignore[override]  # parses to a dict
        """Parse the JSON text and check it (an object of at most 10 keys).

        A NUL character is ``nul_character`` as in every other parameter and body string,
        whether it is in the text itself or escaped (``\\u0000``) in a string or key of the
        JSON; a lone surrogate escape is malformed JSON here, as in a body.

        Raises:
            ValidationError: a NUL (code ``nul_character``); not JSON, not an object, too
                many keys, too deep, or a lone surrogate (code ``invalid_filter``).
        """
        text = super().to_python(value)
        if text in (None, ""):
            return None
        if "\x00" in text:
            raise ValidationError("NUL characters are not allowed.", code=NulCharacter.code)
        try:
            parsed = parse_json(text)
        except ValueError as exc:
            raise ValidationError(
                f"metadata must be a JSON object: {exc}.", code="invalid_filter"
            ) from None
        try:
            return check_metadata_filter(parsed)
        except InvalidText:  # what the body parser calls a parse error
            raise ValidationError(
                "metadata must be a JSON object: a string contains a lone surrogate.",
                code="invalid_filter",
            ) from None
        except (InvalidFilter, NulCharacter) as exc:
            raise ValidationError(exc.message, code=exc.code) from None


#: The ``metadata`` filter's value: a JSON object of at most ``MAX_METADATA_FILTER_KEYS`` keys,
#: each any JSON value. Sent as JSON text: the schema describes the parameter with
#: ``content: application/json`` (``api.openapi.json_query_parameters``).
METADATA_FILTER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "maxProperties": MAX_METADATA_FILTER_KEYS,
    "additionalProperties": True,
}


class MetadataFilter(django_filters.Filter):
    """A filter parsed by :class:`MetadataFilterField`."""

    field_class = MetadataFilterField


def _noop(queryset, name, value):  # type: ignore[no-untyped-def]  # unannotated: the schema then types filters by class
    """Filter method that does nothing: :meth:`SessionFilter.filter_queryset` builds the query."""
    return queryset


_FilterT = TypeVar("_FilterT", bound=django_filters.Filter)


def with_schema(schema: dict[str, Any], filter_: _FilterT) -> _FilterT:
    """``filter_`` described in the OpenAPI schema by ``schema``, its ``help_text`` kept as the
    parameter's description.

    drf-spectacular takes an overridden parameter's description only from the ``description``
    key of the overriding schema, so ``extend_schema_field`` alone drops the help text.

    Args:
        schema: the parameter's JSON schema (``type``, ``pattern``, …).
        filter_: a filter with a ``help_text``.

    Returns:
        ``filter_`` itself, annotated.

    Raises:
        KeyError: ``filter_`` has no ``help_text`` (every parameter is described).
    """
    described = {**schema, "description": str(filter_.extra["help_text"])}
    # drf-spectacular's annotation of extend_schema_field takes fields and serializers, not filters
    return extend_schema_field(described)(filter_)  # type: ignore[type-var]


class _CopiedShallow(OrderedDict[str, Any]):
    """A dict of filters whose deep copy is a new dict of shallow copies of them: django-filter
    deep-copies a filterset's ``base_filters`` for every instance only to set ``model`` and
    ``parent`` on each copy, and a shallow copy takes those as well without copying every
    filter's help text and field arguments (docs/design.md §14.5). :class:`SessionFilter`'s
    own ``base_filters`` only: a subclass's are django-filter's plain dict, deep-copied."""

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        copied = {}
        for name, value in self.items():
            clone = object.__new__(type(value))
            clone.__dict__.update(value.__dict__)
            copied[name] = clone
        return copied


class _Shared(dict[str, Any]):
    """A dict of form fields whose deep copy is a new dict of the same fields: Django deep-
    copies a form's ``base_fields`` for every instance, yet cleaning reads a field and never
    changes it, and these fields (:class:`SessionFilter`'s form's) are built once and never
    changed per request (docs/design.md §14.5)."""

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return dict(self)


class SessionFilter(django_filters.FilterSet):
    """List filters of docs/design.md §7.2; ``filter_queryset`` delegates to the service.

    The request's scope comes from ``request.cortex_scope`` (set by ``HasCortexScope``).
    """

    agent_id = with_schema(
        {"type": "string", "minLength": 1, "maxLength": 255, "pattern": AGENT_ID_PATTERN},
        AgentIdFilter(method=_noop, strip=False, help_text="Only this agent's sessions."),
    )
    exact = StrictBooleanFilter(
        method=_noop,
        help_text="Only sessions stored at the request's scope itself, not beneath it.",
    )
    default_only = StrictBooleanFilter(method=_noop, help_text="Only default sessions.")
    search = with_schema(
        {"type": "string", "maxLength": 500, "pattern": r"^[^\u0000]*$"},
        TextFilter(
            method=_noop,
            max_length=500,
            strip=False,
            help_text="Case-insensitive substring of the title; % and _ match literally.",
        ),
    )
    ordering = django_filters.ChoiceFilter(
        method=_noop,
        choices=ORDERING_CHOICES,
        help_text=(
            "One sort key, '-' for descending; default -updated_at (ties broken by id). A "
            "list of keys (title,-created_at) is refused: 400 invalid_filter."
        ),
    )
    archived = django_filters.ChoiceFilter(
        method=_noop,
        choices=[(value, value) for value in ARCHIVED_CHOICES],
        help_text="false (default): live sessions only; true: archived only; any: both.",
    )
    metadata = with_schema(
        METADATA_FILTER_SCHEMA,
        MetadataFilter(
            method=_noop,
            help_text=(
                "A JSON object (URL-encoded): sessions whose metadata has each of its "
                f"top-level keys (at most {MAX_METADATA_FILTER_KEYS}) with an equal JSON value, "
                "compared as PostgreSQL's jsonb compares them on every database: object keys in "
                'any order, 1 equal to 1.0, a string never equal to a number ({"n": 1} does not '
                'match {"n": "1"}), arrays in order. Anything but a JSON object is 400 '
                "invalid_filter, and so is what no stored metadata can hold: a number "
                "out of range (1e400), a lone surrogate, a key given twice, nesting over "
                "31 levels, an object of more than MAX_JSON_KEYS keys; a NUL character "
                "(raw or escaped) is 400 nul_character."
            ),
        ),
    )

    q = with_schema(
        SEARCH_QUERY_SCHEMA,
        SearchQueryFilter(
            method=_noop,
            strip=False,
            help_text=(
                f"{SEARCH_QUERY_HELP} or in the title. PostgreSQL: full-text search, "
                'websearch syntax (words, "quoted phrases", or, -word), best first unless '
                "`ordering` is given; SQLite: case-insensitive substring, newest first; "
                "MySQL/MariaDB: 400 `invalid_filter`. Each result's `match` has a snippet "
                "(HTML-escaped, hits in <mark>), the message's seq and the rank. With "
                "`cursor`, `ordering` is required."
            ),
        ),
    )

    class Meta:
        model = Session
        fields: list[str] = []

    #: The form class of each filterset class, built on first use (:meth:`get_form_class`).
    _form_classes: dict[type, type[forms.Form]] = {}

    def get_form_class(self) -> type[forms.Form]:
        """The form of the parameters, built once per filterset class (django-filter builds a
        new form class, and a form field per filter, on every request). Each form instance
        gets its own dict of the class's fields, the fields themselves shared (:class:`_Shared`):
        Django's deep copy of every field and widget per form is left out (docs/design.md
        §14.5)."""
        cls = type(self)
        form_class = SessionFilter._form_classes.get(cls)
        if form_class is None:
            form_class = super().get_form_class()
            form_class.base_fields = _Shared(form_class.base_fields)
            SessionFilter._form_classes[cls] = form_class
        return form_class

    @cached_property
    def session_filters(self) -> services.SessionFilters:
        """The validated parameters as the services'
        :class:`~cortex_sessions.services.SessionFilters`, built once per request from the
        form's cleaned data (the list and the count read it).

        Raises:
            InvalidFilter, InvalidAgentId, NulCharacter, InvalidText: a value the form let
                through that the services refuse (400 with the service's code).
        """
        data = self.form.cleaned_data
        return services.SessionFilters(
            agent_id=data.get("agent_id") or None,
            exact=bool(data.get("exact")),
            default_only=bool(data.get("default_only")),
            search=data.get("search") or None,
            archived=ARCHIVED_CHOICES[data.get("archived") or "false"],
            metadata=data.get("metadata"),
            q=data.get("q") or None,
        )

    def filter_queryset(self, queryset: Any) -> Any:
        """The sessions the service lists for the request's scope and these parameters.

        ``queryset`` (the view's scoped base queryset) is replaced, not refined: the service
        builds the whole query so its rules apply unchanged.
        """
        scope = cast(Any, self.request).cortex_scope  # set by HasCortexScope
        return services.session_queryset(
            scope=scope,
            filters=self.session_filters,
            ordering=self.form.cleaned_data.get("ordering") or None,
        )


# Only the class's own dict: a subclass's metaclass builds a plain one (django-filter's copies).
SessionFilter.base_filters = _CopiedShallow(SessionFilter.base_filters)


class SessionFilterBackend(DjangoFilterBackend):
    """``DjangoFilterBackend`` whose validation errors are 400 ``invalid_filter``."""

    def filter_queryset(self, request: Any, queryset: Any, view: Any) -> Any:
        """Validate the parameters and return the filtered queryset.

        Raises:
            InvalidQuery: a parameter has a bad value.
        """
        filterset = self.get_validated_filterset(request, queryset, view)
        return filterset.qs if filterset is not None else queryset

    def get_validated_filterset(self, request: Any, queryset: Any, view: Any) -> Any:
        """The bound, validated filterset of the view (``None`` when it has none).

        Raises:
            InvalidQuery: a parameter has a bad value.
        """
        filterset = self.get_filterset(request, queryset, view)
        if filterset is not None:
            # An empty value would read as "no filter" and answer everything: a client
            # deleting what a filter returned would delete every session. ``search`` is a
            # substring, which the empty string is of every title.
            blank = {
                name: [
                    ErrorDetail(
                        EMPTY_VALUE_MESSAGE,
                        code=getattr(filterset.form.fields[name], "rule_code", "invalid"),
                    )
                ]
                for name in filterset.filters
                if name != "search" and "" in request.query_params.getlist(name)
            }
            if blank:
                raise InvalidQuery(blank)
        if filterset is not None and not filterset.is_valid():
            raise InvalidQuery(
                {
                    name: [
                        ErrorDetail(message, code=error.code or "invalid")
                        for error in errors.as_data()
                        for message in error.messages
                    ]
                    for name, errors in cast(Any, filterset.errors).items()  # an ErrorDict
                }
            )
        return filterset
