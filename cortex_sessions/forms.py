"""Forms of the Django admin for sessions (docs/design.md §7.4).

The forms only validate: they mirror the rules of :mod:`cortex_sessions.services` so an
operator sees a form error instead of a crash, and the admin then saves through the services.
Neither form has a field for an app-owned column (counters, ``last_message``, ``last_seq``,
``backfilled_by``); the change form has no field for ``agent_id``, ``scope`` or ``is_default``
either, so nothing posted for them can be written (docs/design.md §2.6, §5).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from django import forms
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

from .content import check_json_object
from .exceptions import CortexSessionsError, InvalidInput
from .models import Session
from .scope import Scope

__all__ = ["SessionAddForm", "SessionChangeForm"]


def _as_validation_error(exc: CortexSessionsError) -> ValidationError:
    return ValidationError(exc.message, code=exc.code)


if TYPE_CHECKING:
    _ModelForm = forms.ModelForm[Session]
else:  # Django's ModelForm is not subscriptable at run time
    _ModelForm = forms.ModelForm


class _SessionFieldsForm(_ModelForm):
    """The host-owned fields both forms edit: ``title``, ``metadata`` and ``cwd``."""

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
        """Metadata must be a JSON object (docs/design.md §3.1); an empty box means ``{}``."""
        value = self.cleaned_data.get("metadata")
        if value is None:
            return {}
        try:
            return check_json_object(value)
        except InvalidInput as exc:
            raise _as_validation_error(exc) from None


class SessionChangeForm(_SessionFieldsForm):
    """Edits ``title``, ``metadata`` and ``cwd`` of an existing session (docs/design.md §7.1 update)."""


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
        # Surrounding white space is part of a scope value; Scope.parse decides, not the form.
        cast(forms.CharField, self.fields["scope"]).strip = False

    def clean_agent_id(self) -> str:
        """1–255 characters without control characters (as the services require)."""
        value: str = self.cleaned_data["agent_id"]
        if any(ord(char) < 32 or ord(char) == 127 for char in value):
            raise ValidationError(
                _("The agent id may not contain control characters."), code="invalid_agent_id"
            )
        return value

    def clean_scope(self) -> str:
        """Parse the scope (docs/design.md §2.1–2.2) and return its canonical string."""
        try:
            return Scope.parse(self.cleaned_data["scope"]).canonical
        except CortexSessionsError as exc:
            raise _as_validation_error(exc) from None
