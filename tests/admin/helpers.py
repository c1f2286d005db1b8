"""Helpers for the admin tests: URLs, posting a page's own form back, flash messages, bulk rows."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.messages import get_messages
from django.urls import reverse

from cortex_sessions.models import Message, Session


def changelist_url(model: str = "session") -> str:
    return reverse(f"admin:cortex_sessions_{model}_changelist")


def add_url() -> str:
    return reverse("admin:cortex_sessions_session_add")


def change_url(obj: Session | Message) -> str:
    return reverse(f"admin:cortex_sessions_{obj._meta.model_name}_change", args=[obj.pk])


def delete_url(obj: Session | Message) -> str:
    return reverse(f"admin:cortex_sessions_{obj._meta.model_name}_delete", args=[obj.pk])


def flash_messages(response: Any) -> list[str]:
    """The messages the admin queued with ``message_user`` during the request."""
    return [str(message) for message in get_messages(response.wsgi_request)]


def _field_data(form: Any) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for name, field in form.fields.items():
        bound = form[name]
        value = bound.value()
        if isinstance(field.widget, forms.CheckboxInput):
            if value:
                data[bound.html_name] = "on"
            continue
        if value is not None:
            data[bound.html_name] = value
        if field.show_hidden_initial:  # e.g. JSONField with a callable default
            data[bound.html_initial_name] = field.prepare_value(bound.initial)
    return data


def page_form_data(response: Any) -> dict[str, Any]:
    """What a browser would post back from an admin change page: the main form as rendered,
    plus every inline's management form and hidden fields."""
    data = _field_data(response.context["adminform"].form)
    for inline in response.context["inline_admin_formsets"]:
        formset = inline.formset
        data.update(_field_data(formset.management_form))
        for form in formset.forms:
            data.update(_field_data(form))
    return data


def bulk_messages(session: Session, count: int) -> None:
    """``count`` messages written in bulk, with the session's counters set to match."""
    Message.objects.bulk_create(
        (
            Message(
                session=session,
                agent_id=session.agent_id,
                scope=session.scope,
                seq=seq,
                role=Message.Role.USER if seq % 2 else Message.Role.ASSISTANT,
                source=Message.Source.USER if seq % 2 else Message.Source.HOST,
                content=[{"type": "text", "text": f"msg-{seq:05d}"}],
            )
            for seq in range(1, count + 1)
        ),
        batch_size=2000,
    )
    Session.objects.filter(pk=session.pk).update(
        message_count=count, last_seq=count, last_message=f"msg-{count:05d}"
    )
    session.refresh_from_db()
