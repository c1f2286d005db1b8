"""Forms of the Django admin for sessions (docs/design.md §7.4).

The forms only validate: they mirror the rules of :mod:`cortex_sessions.services` so an
operator sees a form error instead of a crash, and the admin then saves through the services.
Neither form has a field for an app-owned column (counters, ``last_message``, ``last_seq``,
``backfilled_by``); the change form has no field for ``agent_id``, ``scope`` or ``is_default``
either, so nothing posted for them can be written (docs/design.md §2.6, §5).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from django import forms
from django.core.exceptions import ValidationError
from django.forms.fields import InvalidJSONInput
from django.utils.translation import gettext_lazy as _

from .content import MAX_JSON_DEPTH, check_json_object, parse_json
from .exceptions import CortexSessionsError, InvalidInput
from .models import Session
from .scope import Scope
from .services import check_agent_id

__all__ = ["SessionAddForm", "SessionChangeForm", "StoredJSONField"]


def _as_validation_error(exc: CortexSessionsError) -> ValidationError:
    return ValidationError(exc.message, code=exc.code)


class StoredJSONField(forms.JSONField):
    """A JSON box for a value the app stores (``metadata``), checked by the services' own rule.

    Django's ``JSONField`` lets through what the app's JSON rule refuses, and some of it crashes
    the page instead of showing a form error (docs/design.md §12.5): nesting deep enough to
    exhaust Python's recursion limit, ``NaN``, and a lone surrogate written as ``"\\ud800"``,
    which the form echoes back into a page that cannot be encoded. Here the text is parsed by
    :func:`cortex_sessions.content.parse_json`, the value checked by ``check`` (the function the
    services call, e.g. :func:`~cortex_sessions.content.check_json_object`), and a refused box is
    shown again exactly as typed.

    Args:
        check: ``(value) -> value``, raising :class:`~cortex_sessions.exceptions.InvalidInput`
            (its ``code`` becomes the form error's code).
        Any other argument: as for ``forms.JSONField``.
    """

    default_error_messages = {
        "invalid": _("Enter valid JSON (no NaN or Infinity, nested at most %(depth)s deep).")
    }

    def __init__(self, *, check: Callable[[Any], Any], **kwargs: Any) -> None:
        self.check = check
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> Any:
        """The checked value; ``None`` for an empty box.

        Raises:
            ValidationError: not JSON (code ``invalid``), or refused by ``check`` (its code).
        """
        if self.disabled:
            return value
        if value in self.empty_values:
            return None
        if isinstance(value, str):
            try:
                value = parse_json(value)
            except ValueError:
                raise ValidationError(
                    self.error_messages["invalid"], code="invalid", params={"depth": MAX_JSON_DEPTH}
                ) from None
        try:
            return self.check(value)
        except InvalidInput as exc:
            raise _as_validation_error(exc) from None

    def bound_data(self, data: Any, initial: Any) -> Any:
        """What the box shows again after a refused submit: the text as typed."""
        if self.disabled:
            return initial
        if data is None:
            return None
        return InvalidJSONInput(data)


if TYPE_CHECKING:
    _ModelForm = forms.ModelForm[Session]
else:  # Django's ModelForm is not subscriptable at run time
    _ModelForm = forms.ModelForm


class _SessionFieldsForm(_ModelForm):
    """The host-owned fields both forms edit: ``title``, ``metadata`` and ``cwd``."""

    metadata = StoredJSONField(
        label=_("metadata"),
        required=False,
        check=check_json_object,
        help_text=_("A JSON object; leave empty for {}."),
    )

    cwd = forms.CharField(
        label=_("Working directory"),
        required=False,
        strip=False,
        empty_value=None,
        widget=forms.TextInput(attrs={"class": "vLargeTextField"}),
        help_text=_("Where the session was recorded; leave empty for none."),
    )

    class Meta:
        model = Session
        fields: tuple[str, ...] = ("title", "metadata", "cwd")

    def clean_metadata(self) -> dict[str, Any]:
        """Metadata is a JSON object (docs/design.md §3.1, checked by the field); an empty box
        means ``{}``."""
        value: dict[str, Any] | None = self.cleaned_data.get("metadata")
        return {} if value is None else value


class SessionChangeForm(_SessionFieldsForm):
    """Edits ``title``, ``metadata`` and ``cwd`` of an existing session (docs/design.md §7.1
    update), and the host's retention controls ``expires_at`` and ``legal_hold`` (§18.1)."""

    class Meta(_SessionFieldsForm.Meta):
        fields = ("title", "metadata", "cwd", "expires_at", "legal_hold")
        help_texts = {
            "expires_at": _(
                "When the session expires: from then on every read hides it and "
                "cortex_sessions_expire deletes it (unless it is on legal hold). Empty: never."
            ),
            "legal_hold": _(
                "On legal hold nothing deletes the session or its messages: not the API, this "
                "admin, the expiry sweep nor an erasure."
            ),
        }


class SessionAddForm(_SessionFieldsForm):
    """Creates a session: asks for agent and scope, and whether it is the default (docs/design.md §3.1).

    The scope is parsed with :meth:`Scope.parse` and stored in canonical form; a second default
    for the same agent and scope is refused by the model's constraint validation as a form
    error, before the admin calls :func:`cortex_sessions.services.create_session`.
    """

    class Meta(_SessionFieldsForm.Meta):
        fields = ("agent_id", "scope", "is_default", "title", "metadata", "cwd")
        help_texts = {
            "scope": _(
                "Canonical scope, e.g. org=acme/user=42. It cannot be changed after creation."
            ),
            "is_default": _("Make this the agent's default session at exactly this scope."),
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Surrounding white space is part of a scope value and of an agent id ("bot " and
        # "bot" are two agents): the services' rules decide, the form strips nothing.
        cast(forms.CharField, self.fields["scope"]).strip = False
        cast(forms.CharField, self.fields["agent_id"]).strip = False

    def clean_agent_id(self) -> str:
        """The services' rule (:func:`cortex_sessions.services.check_agent_id`): 1–255
        characters, not blank, without control characters; every refusal is
        ``invalid_agent_id``."""
        try:
            return check_agent_id(self.cleaned_data["agent_id"])
        except CortexSessionsError as exc:
            raise _as_validation_error(exc) from None

    def clean_scope(self) -> str:
        """Parse the scope (docs/design.md §2.1–2.2) and return its canonical string."""
        try:
            return Scope.parse(self.cleaned_data["scope"]).canonical
        except CortexSessionsError as exc:
            raise _as_validation_error(exc) from None
