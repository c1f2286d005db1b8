"""factory-boy factories for the app's models."""

from __future__ import annotations

import factory

from cortex_sessions.models import Message, Session


class SessionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Session

    agent_id = "agent-1"
    scope = "org=acme/user=1"
    title = factory.Sequence(lambda n: f"Session {n}")


class MessageFactory(factory.django.DjangoModelFactory):
    """A raw Message row. Use the services to append; this is for legacy rows and drift tests."""

    class Meta:
        model = Message

    agent_id = "agent-1"
    scope = "org=acme/user=1"
    role = Message.Role.USER
    source = Message.Source.USER
    content = factory.Sequence(lambda n: [{"type": "text", "text": f"message {n}"}])
