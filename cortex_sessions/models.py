"""Session and Message (docs/design.md §3).

App-owned columns (``message_count``, ``last_message``, ``last_seq``, ``backfilled_by``, ``scope``,
``agent_id``, ``is_default``, ``archived_at``, ``forked_from``, ``forked_at_seq``, the usage
totals ``input_tokens``, ``output_tokens``, ``cost`` and ``context_tokens``; a message's
``token_count`` and ``compacts_through_seq``) are written only by :mod:`cortex_sessions.services` and the backfill,
through queryset updates. ``Session.save()`` on an existing row writes only the host-editable
columns, so no read-modify-write (an admin form, host code) can put stale counters back (docs/design.md §5).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import connections, models
from django.db.models import Case, Q, Value, When
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from uuid6 import uuid7

from .constraints import PartialIndex, PartialUniqueConstraint
from .content import content_text
from .counters import CONVERSATION_Q
from .fields import ExactCharField, ScopeField
from .matches import SearchMatch, match_of
from .scope import Scope, scope_q

__all__ = [
    "EDITABLE_SESSION_FIELDS",
    "EXTERNAL_ID_MAX_BYTES",
    "Erasure",
    "IdempotencyKey",
    "ImportedConversation",
    "Message",
    "Session",
    "SessionQuerySet",
    "not_expired_q",
]

#: The columns a plain ``save()`` of an existing session may write (docs/design.md §7.1 update).
#: ``expires_at`` and ``legal_hold`` are host-owned (docs/design.md §18.1): the admin and host code
#: write them with ``save()``; the REST API's client may set ``expires_at`` but never ``legal_hold``.
EDITABLE_SESSION_FIELDS = ("title", "metadata", "cwd", "updated_at", "expires_at", "legal_hold")
#: Longest external conversation id, in UTF-8 bytes: it is indexed with the agent id and scope,
#: and the three together must stay under PostgreSQL's B-tree entry limit.
EXTERNAL_ID_MAX_BYTES = 255


def not_expired_q(now: datetime | None = None, *, prefix: str = "") -> Q:
    """The sessions that have not expired at ``now`` (default: the current time): no
    ``expires_at``, or one still ahead (docs/design.md §18.1). ``prefix`` reaches the session
    through a relation (``"session__"`` from a message)."""
    field = f"{prefix}expires_at"
    return Q(**{f"{field}__isnull": True}) | Q(**{f"{field}__gt": now or timezone.now()})


class SessionQuerySet(models.QuerySet["Session"]):
    def within(
        self, scope: Scope | str, *, exact: bool = False, expired: bool = False
    ) -> SessionQuerySet:
        """Sessions at ``scope`` and beneath it, or exactly at it with ``exact`` (docs/design.md §2.3).

        A session whose ``expires_at`` has passed is left out, as every read hides it until
        the expiry sweep deletes it (docs/design.md §18.1); ``expired=True`` keeps it (the
        sweep, erasure).

        Raises:
            NoScope: ``scope`` is missing or empty.
            InvalidScope: ``scope`` is not a canonical scope string.
        """
        queryset = self.filter(scope_q(scope, exact=exact))
        return queryset if expired else queryset.filter(not_expired_q())

    def defaults_of(self, *, agent_id: str, scope: str) -> SessionQuerySet:
        """The default session of ``agent_id`` at exactly the canonical ``scope`` (docs/design.md §6).

        Written against the database's one-default index: ``is_default`` where that index is
        partial (PostgreSQL, SQLite), ``default_flag`` where it keys on the generated column
        (MySQL, MariaDB). So a locking read (``select_for_update``) reaches the default's
        index entry alone and never waits on another session of the same agent and scope,
        which InnoDB would otherwise lock while scanning (docs/design.md §15).

        Returns:
            A queryset of at most one row (more only while a swap is half-written inside
            another transaction).
        """
        if connections[self.db].features.supports_partial_indexes:
            return self.filter(agent_id=agent_id, scope=scope, is_default=True)
        return self.filter(agent_id=agent_id, scope=scope, default_flag=True)


class Session(models.Model):
    """One conversation thread against one agent in one scope (docs/design.md §3.1)."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    agent_id = ExactCharField(_("agent id"), max_length=255)
    scope = ScopeField(_("scope"))
    title = models.CharField(_("title"), max_length=500, blank=True, default="")
    metadata = models.JSONField(_("metadata"), default=dict, blank=True)
    cwd = models.TextField(_("working directory"), null=True, blank=True)  # noqa: DJ001 - §3.1
    message_count = models.BigIntegerField(_("message count"), default=0, editable=False)
    last_message = models.TextField(_("last message"), blank=True, default="", editable=False)
    #: Highest ``seq`` ever given to a message of this session; ``seq`` is never reused.
    last_seq = models.BigIntegerField(_("last seq"), default=0, editable=False)
    is_default = models.BooleanField(_("default"), default=False)
    #: ``True`` for the default, ``NULL`` otherwise: what the one-default index keys on where
    #: the database has no partial indexes (MySQL, MariaDB; docs/design.md §15).
    default_flag = models.GeneratedField(
        expression=Case(When(is_default=True, then=Value(True)), default=Value(None)),
        output_field=models.BooleanField(null=True),
        db_persist=True,
        verbose_name=_("default flag"),
    )
    backfilled_by = models.CharField(
        _("backfilled by"), max_length=100, blank=True, default="", editable=False
    )
    created_at = models.DateTimeField(_("created at"), default=timezone.now, editable=False)
    updated_at = models.DateTimeField(_("updated at"), default=timezone.now, editable=False)
    #: When the session was archived (read-only until unarchived); ``None`` while live (§11.2).
    archived_at = models.DateTimeField(_("archived at"), null=True, blank=True, editable=False)
    #: The id of the session this one was forked from (§11.1). A plain id, not a foreign key:
    #: it keeps naming the source after the source is deleted.
    forked_from = models.UUIDField(_("forked from"), null=True, blank=True, editable=False)
    #: The source's messages up to this ``seq`` were copied into the fork (§11.1).
    forked_at_seq = models.BigIntegerField(
        _("forked at seq"), null=True, blank=True, editable=False
    )
    #: Sums of the messages' ``usage`` (docs/design.md §16.1), moved with every write that adds
    #: or removes messages, as ``message_count`` is (§5).
    #: Each also has a database default, so rows written by SQL of a host's own (a bulk load)
    #: start at zero rather than failing; the recount sets them from the rows.
    input_tokens = models.PositiveBigIntegerField(
        _("input tokens"), default=0, db_default=0, editable=False
    )
    output_tokens = models.PositiveBigIntegerField(
        _("output tokens"), default=0, db_default=0, editable=False
    )
    cost = models.DecimalField(
        _("cost"),
        max_digits=20,
        decimal_places=6,
        default=Decimal(0),
        db_default=Decimal(0),
        editable=False,
    )
    #: The tokens of what the context read returns without a budget (docs/design.md §16.2).
    context_tokens = models.PositiveBigIntegerField(
        _("context tokens"), default=0, db_default=0, editable=False
    )
    #: When the session expires (docs/design.md §18.1): from then on every read hides it, and
    #: ``manage.py cortex_sessions_expire`` deletes it (unless it is on legal hold).
    expires_at = models.DateTimeField(_("expires at"), null=True, blank=True)
    #: A session on legal hold is never deleted by any path, and its messages are frozen
    #: (docs/design.md §18.1). Set by the admin and host code, never by the REST API's client.
    legal_hold = models.BooleanField(_("legal hold"), default=False, db_default=False)

    objects = SessionQuerySet.as_manager()

    class Meta:
        verbose_name = _("session")
        verbose_name_plural = _("sessions")
        ordering = ["-updated_at", "-id"]
        constraints = [
            PartialUniqueConstraint(
                fields=["agent_id", "scope"],
                condition=Q(is_default=True),
                generated_field="default_flag",
                name="cortex_session_one_default",
                violation_error_message=_(
                    "Another session is already the default for this agent and scope."
                ),
            ),
            models.CheckConstraint(
                condition=Q(message_count__gte=0), name="cortex_session_count_non_negative"
            ),
            models.CheckConstraint(
                condition=Q(last_seq__gte=0), name="cortex_session_last_seq_non_negative"
            ),
            models.CheckConstraint(
                condition=Q(forked_from__isnull=True, forked_at_seq__isnull=True)
                | Q(forked_from__isnull=False, forked_at_seq__gte=0),
                name="cortex_session_fork_provenance",
            ),
        ]
        indexes = [
            # Lists and counts hide archived sessions by default (docs/design.md §11.2): the scope
            # index holds live sessions only, so a default count is still an index-only scan;
            # archived ones have their own, and ``archived=any`` reads both. Without partial
            # indexes (MySQL/MariaDB) one index carries ``archived_at`` after the scope and
            # serves both (docs/design.md §15.3).
            # Each ends with ``expires_at``, which every read filters on (docs/design.md §18.1),
            # so a count is still answered from the index alone.
            PartialIndex(
                fields=["scope", "-updated_at", "-id", "expires_at"],
                where=Q(archived_at__isnull=True),
                name="cortex_session_scope_idx",
                fallback_fields=["scope", "archived_at", "-updated_at", "-id", "expires_at"],
            ),
            PartialIndex(
                fields=["scope", "-updated_at", "-id", "expires_at"],
                where=Q(archived_at__isnull=False),
                name="cortex_session_archived_idx",
            ),
            models.Index(
                fields=["agent_id", "scope", "-updated_at", "-id", "expires_at"],
                name="cortex_session_agent_idx",
            ),
            # The newest page of a prefix (an org of 100,000 sessions, a project of 10,000):
            # walk newest first and stop at the page, instead of sorting the whole range. The
            # scope is a key column so the prefix range is checked in the index, and only the
            # rows of the page are read from the table (docs/performance.md).
            models.Index(fields=["-updated_at", "-id", "scope"], name="cortex_session_recent_idx"),
            # The expiry sweep (docs/design.md §18.1) walks the sessions whose ``expires_at``
            # has passed, oldest first; most sessions have none, so where partial indexes exist
            # the index holds only those that have one.
            PartialIndex(
                fields=["expires_at", "id"],
                where=Q(expires_at__isnull=False),
                name="cortex_session_expires_idx",
                fallback_fields=["expires_at", "id"],
            ),
        ]

    def __str__(self) -> str:
        return self.title or str(self.id)

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Insert a new session, or write only the editable columns of an existing one.

        On an existing row, ``update_fields`` defaults to ``EDITABLE_SESSION_FIELDS`` and
        ``updated_at`` moves to now; naming an app-owned field raises ``ValueError`` (docs/design.md §5).
        """
        if self._state.adding:
            super().save(*args, **kwargs)
            return
        update_fields = kwargs.get("update_fields")
        fields = set(EDITABLE_SESSION_FIELDS if update_fields is None else update_fields)
        forbidden = fields - set(EDITABLE_SESSION_FIELDS)
        if forbidden:
            raise ValueError(
                f"{', '.join(sorted(forbidden))} belong to cortex_sessions and are written only "
                "by its services."
            )
        self.updated_at = timezone.now()
        kwargs["update_fields"] = fields | {"updated_at"}
        super().save(*args, **kwargs)

    @property
    def search_match(self) -> SearchMatch | None:
        """Why the session matched when it was listed with ``q`` (snippet of its best-matching
        message or title, that message's ``seq``, the rank); ``None`` otherwise
        (docs/design.md §11.5)."""
        return match_of(getattr(self, "search_hit", None), getattr(self, "search_rank", None))


class Message(models.Model):
    """One conversation message (docs/design.md §3.2). ``session`` is null only for legacy rows (§4)."""

    class Role(models.TextChoices):
        USER = "user"
        ASSISTANT = "assistant"
        SYSTEM = "system"
        TOOL = "tool"

    class Source(models.TextChoices):
        USER = "user"
        CHECKPOINT = "checkpoint"
        SESSION_REFERENCE = "session-reference"
        HOST = "host"

    #: No index of its own: the unique ``(session, seq)`` index serves every lookup by
    #: session, and a second one made the planner read a long session through it and sort
    #: (docs/performance.md).
    session = models.ForeignKey(
        Session,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="messages",
        db_index=False,
    )
    agent_id = ExactCharField(max_length=255)
    scope = ScopeField()
    seq = models.BigIntegerField(null=True, blank=True)
    role = models.CharField(max_length=16, choices=Role.choices)
    source = models.CharField(max_length=32, choices=Source.choices, default=Source.USER)
    content = models.JSONField(default=list)
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    #: What producing the message cost, as the host reports it (docs/design.md §16.1).
    usage = models.JSONField(_("usage"), null=True, blank=True, default=None, editable=False)
    #: The tokens the message takes in a model's context, from ``TOKEN_COUNTER`` (§16.2).
    #: A database default too, as the session totals have (a bulk load's rows count 0).
    token_count = models.PositiveIntegerField(
        _("token count"), default=0, db_default=0, editable=False
    )
    #: On a compaction summary: the last ``seq`` it stands for (docs/design.md §16.3).
    compacts_through_seq = models.PositiveIntegerField(
        _("compacts through seq"), null=True, blank=True, editable=False
    )

    class Meta:
        verbose_name = _("message")
        verbose_name_plural = _("messages")
        ordering = ["session", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["session", "seq"], name="cortex_message_session_seq"),
            models.CheckConstraint(
                condition=Q(session__isnull=True, seq__isnull=True)
                | Q(session__isnull=False, seq__gt=0),
                name="cortex_message_seq_with_session",
            ),
        ]
        indexes = [
            models.Index(fields=["agent_id", "scope", "id"], name="cortex_msg_agent_scope_idx"),
            # Session references (docs/design.md §8.5-§8.6) read a session's newest checkpoint, count the
            # conversation messages after it and walk them newest first; these partial indexes
            # keep each of those reads proportional to what it returns, not to the session.
            # Without partial indexes (MySQL/MariaDB) the checkpoint index keys on role and
            # source instead, and the unique (session, seq) index serves the conversation reads
            # (a full twin of it would only slow appends; docs/design.md §15.3).
            PartialIndex(
                fields=["session", "seq"],
                where=Q(role="user", source="checkpoint"),
                name="cortex_msg_checkpoint_idx",
                fallback_fields=["session", "role", "source", "seq"],
            ),
            PartialIndex(
                fields=["session", "seq"],
                where=CONVERSATION_Q,
                name="cortex_msg_conversation_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.role} #{self.seq}"

    @property
    def search_match(self) -> SearchMatch | None:
        """Why the message matched when it was listed with ``q`` (a snippet with the hits
        marked, its ``seq``, the rank); ``None`` otherwise (docs/design.md §11.5)."""
        hit = getattr(self, "search_hit", None)
        return None if hit is None else match_of(hit)

    @property
    def text(self) -> str:
        """The message's text blocks joined by ``\\n`` (docs/design.md §3.2)."""
        return content_text(self.content)


class ImportedConversation(models.Model):
    """The external id a session was imported under (``cortex_sessions.transfer``).

    One row per imported session, written in the same transaction as the session and its
    messages, so a re-import of the same conversation for the same agent and scope is skipped.
    The id lives here rather than in ``Session.metadata`` because metadata is host-owned and
    never interpreted (docs/design.md §3.1), and because the unique constraint both serves the lookup
    and settles concurrent imports of the same file. Deleting the session deletes this row, so
    a deleted conversation can be imported again.
    """

    session = models.OneToOneField(
        Session, on_delete=models.CASCADE, related_name="import_record", editable=False
    )
    agent_id = ExactCharField(_("agent id"), max_length=255, editable=False)
    scope = ScopeField(_("scope"), editable=False)
    external_id = ExactCharField(_("external id"), max_length=255, editable=False)
    imported_at = models.DateTimeField(_("imported at"), default=timezone.now, editable=False)

    class Meta:
        verbose_name = _("imported conversation")
        verbose_name_plural = _("imported conversations")
        constraints = [
            models.UniqueConstraint(
                fields=["agent_id", "scope", "external_id"], name="cortex_import_external_id"
            )
        ]

    def __str__(self) -> str:
        return f"{self.external_id} -> {self.session_id}"


class IdempotencyKey(models.Model):
    """The first outcome of a creating call made with an ``Idempotency-Key`` (docs/design.md §12.1).

    Claimed (inserted) first in the transaction of the write it records, and completed at its
    end, only when a key is given. A replay with the same ``(scope, endpoint, key)`` within
    ``IDEMPOTENCY_TTL`` returns the recorded outcome instead of writing again; the unique
    constraint makes concurrent duplicates wait for the first, running nothing of their own,
    and then replay it. ``manage.py cortex_sessions_prune`` deletes expired rows.

    Attributes:
        scope: the caller's canonical scope.
        endpoint: what was called, e.g. ``api:POST /api/cortex/sessions/`` or
            ``service:append_messages``.
        key: the client's key, 1–255 visible ASCII characters other than the comma.
        fingerprint: SHA-256 (hex) of the call's input; another input under the same key is
            refused with ``idempotency_key_reused``.
        status_code: the HTTP status of the first answer (0 for a service call).
        response: the first answer: the response body as sent (JSON text), for a service
            call the ids of what it wrote, or for the API's one-statement append what rebuilds
            its body (``services.keyed_append.append_recorded``, docs/design.md §12.1).
        created_at: when the write committed; the row expires ``IDEMPOTENCY_TTL`` later.
    """

    scope = ScopeField(_("scope"), editable=False)
    # Exact on every database ("Key" and "key" are two keys); on MySQL/MariaDB the key is an
    # ASCII column so the unique index (scope, endpoint, key) fits InnoDB's 3,072 bytes.
    endpoint = ExactCharField(_("endpoint"), max_length=300, editable=False)
    key = ExactCharField(_("idempotency key"), max_length=255, editable=False, ascii=True)
    fingerprint = models.CharField(_("fingerprint"), max_length=64, editable=False)
    status_code = models.PositiveSmallIntegerField(_("status code"), default=0, editable=False)
    response = models.TextField(_("response"), editable=False)
    created_at = models.DateTimeField(_("created at"), default=timezone.now, editable=False)

    class Meta:
        verbose_name = _("idempotency key")
        verbose_name_plural = _("idempotency keys")
        constraints = [
            models.UniqueConstraint(
                fields=["scope", "endpoint", "key"], name="cortex_idempotency_key_once"
            )
        ]
        indexes = [models.Index(fields=["created_at"], name="cortex_idempotency_created")]

    def __str__(self) -> str:
        return f"{self.key} ({self.endpoint})"


class Erasure(models.Model):
    """One erasure of a scope: what was asked, by whom, and what it deleted (docs/design.md §18.2).

    Written by :func:`cortex_sessions.services.erasure.erase_scope` only: each batch's deletes and the
    increment of ``counts`` commit together, so the record is exact at every moment and a run
    killed mid-way resumes from it. It keeps no content: the scope, counts, who and when.

    Attributes:
        scope: the canonical scope erased (sessions at and beneath it).
        status: ``pending`` (recorded, not started), ``running`` (some batches done, or killed
            mid-run: resume it), ``done``.
        counts: rows deleted per table, ``{"app_label.Model": n}`` (Django's model labels).
        skipped_held: sessions at or beneath ``scope`` kept because of their legal hold.
        requested_by: who asked (a user's primary key or a free string such as
            ``"cli:ops"``), never content.
        created_at, finished_at: when it was asked for and when it was done (``None`` until then).
    """

    class Status(models.TextChoices):
        PENDING = "pending", _("pending")
        RUNNING = "running", _("running")
        DONE = "done", _("done")

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    scope = ScopeField(_("scope"), editable=False)
    status = models.CharField(
        _("status"), max_length=16, choices=Status.choices, default=Status.PENDING, editable=False
    )
    counts = models.JSONField(_("deleted rows per table"), default=dict, editable=False)
    skipped_held = models.BigIntegerField(_("held sessions skipped"), default=0, editable=False)
    requested_by = models.CharField(_("requested by"), max_length=255, blank=True, default="")
    created_at = models.DateTimeField(_("created at"), default=timezone.now, editable=False)
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True, editable=False)

    class Meta:
        verbose_name = _("erasure")
        verbose_name_plural = _("erasures")
        ordering = ["-created_at", "-id"]
        permissions = [("erase_scope", _("Can erase every session of a scope"))]

    def __str__(self) -> str:
        return f"{self.scope} ({self.status})"
