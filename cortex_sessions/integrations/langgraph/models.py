"""What a LangGraph checkpoint saver keeps (docs/design.md §19.1).

Three tables, as LangGraph's own database savers have them: checkpoints (one row per
checkpoint of a thread and namespace, the channel values left out), channel blobs (one row per
channel and version: a value is stored once however many checkpoints share it) and pending
writes (one row per task and write index). Every row is a foreign key to the cortex
:class:`~cortex_sessions.models.Session` that is the thread, with ``on_delete=CASCADE``: deleting
or erasing the session deletes its checkpoints with it.

Values are stored as the saver's serializer makes them: a ``type`` and ``bytes``
(``SerializerProtocol.dumps_typed``). Checkpoint metadata is JSON, so ``list(filter=...)`` runs in
the database.

Importing this module in a host that has not installed the integration's app raises
``ImproperlyConfigured``: the models would otherwise silently join the core app.
"""

from __future__ import annotations

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from cortex_sessions.fields import ExactCharField
from cortex_sessions.models import Session

#: The integration's app, which must be in ``INSTALLED_APPS`` for these models to load.
APP_NAME = "cortex_sessions.integrations.langgraph"

if not apps.is_installed(APP_NAME):
    raise ImproperlyConfigured(
        f"The LangGraph integration needs its app: add {APP_NAME!r} to INSTALLED_APPS "
        "(after 'cortex_sessions') and run migrate."
    )

__all__ = ["Checkpoint", "CheckpointBlob", "CheckpointWrite"]

#: Longest namespace, channel name and task id, in characters (each is part of a unique key:
#: 255 four-byte characters keep every key under InnoDB's 3,072 bytes, docs/design.md §15).
NAME_CHARS = 255
#: Longest checkpoint id and channel version (LangGraph's are 36 and 49 characters).
ID_CHARS = 64
#: Longest serializer type name (``"msgpack"``, ``"json"``, ``"empty"``, …).
TYPE_CHARS = 32


class Checkpoint(models.Model):
    """One checkpoint of a thread (a cortex session) in a namespace, without its channel values."""

    session = models.ForeignKey(
        Session,
        on_delete=models.CASCADE,
        related_name="langgraph_checkpoints",
        verbose_name=_("thread"),
        db_index=False,  # the unique key starts with it
    )
    checkpoint_ns = ExactCharField(_("namespace"), max_length=NAME_CHARS, blank=True, default="")
    checkpoint_id = ExactCharField(_("checkpoint id"), max_length=ID_CHARS)
    parent_checkpoint_id = ExactCharField(
        _("parent checkpoint id"), max_length=ID_CHARS, blank=True, default=""
    )
    type = models.CharField(_("type"), max_length=TYPE_CHARS)
    checkpoint = models.BinaryField(_("checkpoint"))
    metadata = models.JSONField(_("metadata"), default=dict, blank=True)
    created_at = models.DateTimeField(_("created at"), default=timezone.now)

    class Meta:
        verbose_name = _("LangGraph checkpoint")
        verbose_name_plural = _("LangGraph checkpoints")
        ordering = ["session", "checkpoint_ns", "-checkpoint_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["session", "checkpoint_ns", "checkpoint_id"],
                name="cortex_langgraph_checkpoint_unique",
            )
        ]

    def __str__(self) -> str:
        return self.checkpoint_id


class CheckpointBlob(models.Model):
    """The value of one channel at one version, in a thread and namespace (``type`` ``"empty"``:
    the channel had no value)."""

    session = models.ForeignKey(
        Session,
        on_delete=models.CASCADE,
        related_name="langgraph_blobs",
        verbose_name=_("thread"),
        db_index=False,
    )
    checkpoint_ns = ExactCharField(_("namespace"), max_length=NAME_CHARS, blank=True, default="")
    channel = ExactCharField(_("channel"), max_length=NAME_CHARS)
    version = ExactCharField(_("version"), max_length=ID_CHARS)
    type = models.CharField(_("type"), max_length=TYPE_CHARS)
    blob = models.BinaryField(_("value"), null=True, blank=True)

    class Meta:
        verbose_name = _("LangGraph channel value")
        verbose_name_plural = _("LangGraph channel values")
        constraints = [
            models.UniqueConstraint(
                fields=["session", "checkpoint_ns", "channel", "version"],
                name="cortex_langgraph_blob_unique",
            )
        ]

    def __str__(self) -> str:
        return f"{self.channel}@{self.version}"


class CheckpointWrite(models.Model):
    """One pending write of a task against a checkpoint (``idx`` negative for LangGraph's special
    channels: error, interrupt, …), its value as the serializer made it (``blob`` ``NULL``: no
    bytes)."""

    session = models.ForeignKey(
        Session,
        on_delete=models.CASCADE,
        related_name="langgraph_writes",
        verbose_name=_("thread"),
        db_index=False,
    )
    checkpoint_ns = ExactCharField(_("namespace"), max_length=NAME_CHARS, blank=True, default="")
    checkpoint_id = ExactCharField(_("checkpoint id"), max_length=ID_CHARS)
    task_id = ExactCharField(_("task id"), max_length=NAME_CHARS)
    idx = models.IntegerField(_("index"))
    channel = ExactCharField(_("channel"), max_length=NAME_CHARS)
    type = models.CharField(_("type"), max_length=TYPE_CHARS)
    #: ``NULL`` when the serializer gave no bytes (``dumps_typed`` returning ``(type, None)``):
    #: read back as ``None``, as LangGraph's in-memory saver keeps it.
    blob = models.BinaryField(_("value"), null=True, blank=True)
    task_path = models.TextField(_("task path"), blank=True, default="")

    class Meta:
        verbose_name = _("LangGraph pending write")
        verbose_name_plural = _("LangGraph pending writes")
        constraints = [
            models.UniqueConstraint(
                fields=["session", "checkpoint_ns", "checkpoint_id", "task_id", "idx"],
                name="cortex_langgraph_write_unique",
            )
        ]

    def __str__(self) -> str:
        return f"{self.task_id}[{self.idx}] {self.channel}"
