"""Retention policies (docs/design.md §18.1): the ``RETENTION`` setting read into
:class:`Policy` values, and the problems the system checks report.

A policy ``{"scope": <prefix>, "agent_id"?: <id>, "after": <seconds>, "action": "delete" |
"archive"}`` applies to the sessions at or beneath ``scope`` (of ``agent_id`` only, when given)
whose ``updated_at`` is more than ``after`` seconds ago. ``manage.py cortex_sessions_expire``
carries them out (:mod:`cortex_sessions.services.retention`). Pure functions: no database.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from .exceptions import CortexSessionsError, InvalidInput, ScopeError
from .scope import canonical_of

__all__ = ["ACTIONS", "POLICY_KEYS", "Policy", "PolicyError", "parse_policies", "parse_policy"]

#: What a policy may do to a session past its age.
ACTIONS = ("delete", "archive")
#: The keys a policy may have; ``agent_id`` is the only optional one.
POLICY_KEYS = frozenset({"scope", "agent_id", "after", "action"})
#: The longest ``after`` (seconds, 1,000 years): a longer one cannot be subtracted from now.
MAX_AFTER = 1000 * 365 * 24 * 3600


class PolicyError(ValueError):
    """A policy of ``RETENTION`` that cannot be applied.

    Attributes:
        index: the policy's position in the list (``None``: the setting itself).
        scope_error: ``True`` when its scope does not parse (check ``E024``), else ``False``
            (``E023``).
    """

    def __init__(self, message: str, *, index: int | None, scope_error: bool = False) -> None:
        super().__init__(message)
        self.index = index
        self.scope_error = scope_error


@dataclass(frozen=True)
class Policy:
    """One retention policy, checked.

    Attributes:
        scope: canonical scope; the policy covers it and everything beneath it.
        agent_id: only this agent's sessions, or ``None`` for every agent's.
        after: seconds since a session's ``updated_at`` after which the action applies (> 0).
        action: ``"delete"`` (sessions on legal hold are skipped and reported) or
            ``"archive"`` (held sessions are archived too: archiving deletes nothing).
    """

    scope: str
    agent_id: str | None
    after: int
    action: Literal["delete", "archive"]

    def cutoff(self, now: datetime) -> datetime:
        """The ``updated_at`` at or before which a session is due at ``now``."""
        return now - timedelta(seconds=self.after)

    def describe(self) -> str:
        """``delete org=acme (agent bot) after 86400 s``, for the command's report."""
        agent = f" (agent {self.agent_id})" if self.agent_id is not None else ""
        return f"{self.action} {self.scope}{agent} after {self.after} s"


def parse_policy(value: Any, index: int) -> Policy:
    """Policy ``index`` of ``RETENTION``, checked.

    Raises:
        PolicyError: not a dict, a missing or unknown key, an unknown action, an ``after``
            that is not a positive integer, a bad ``agent_id`` (``scope_error`` false), or a
            scope that does not parse (``scope_error`` true).
    """
    where = f"RETENTION[{index}]"
    if not isinstance(value, Mapping):
        raise PolicyError(f"{where} is {value!r}, not a dict.", index=index)
    unknown = sorted(map(str, set(value) - POLICY_KEYS))
    if unknown:
        raise PolicyError(f"{where} has unknown keys {unknown!r}.", index=index)
    missing = sorted(POLICY_KEYS - {"agent_id"} - set(value))
    if missing:
        raise PolicyError(f"{where} lacks {missing!r}.", index=index)
    action = value["action"]
    if action not in ACTIONS:
        raise PolicyError(f"{where}['action'] is {action!r}, not one of {ACTIONS!r}.", index=index)
    after = value["after"]
    if not isinstance(after, int) or isinstance(after, bool) or not 0 < after <= MAX_AFTER:
        raise PolicyError(
            f"{where}['after'] is {after!r}, not an integer of seconds from 1 to {MAX_AFTER} (1,000"
            " years).",
            index=index,
        )
    agent_id = value.get("agent_id")
    if agent_id is not None:
        from .services import check_agent_id  # the services import this module's users

        try:
            agent_id = check_agent_id(agent_id)
        except InvalidInput as exc:
            raise PolicyError(f"{where}['agent_id'] is {agent_id!r}: {exc}", index=index) from None
    try:
        scope = canonical_of(value["scope"])
    except (ScopeError, CortexSessionsError, TypeError) as exc:
        raise PolicyError(
            f"{where}['scope'] is {value['scope']!r}, which does not parse: {exc}",
            index=index,
            scope_error=True,
        ) from None
    return Policy(scope=scope, agent_id=agent_id, after=after, action=action)


def parse_policies(value: Any) -> list[Policy]:
    """Every policy of ``RETENTION`` (``value``), checked, in order.

    Raises:
        PolicyError: ``value`` is not a list (``index`` ``None``), or the first bad policy.
    """
    if not isinstance(value, list | tuple):
        raise PolicyError(f"RETENTION is {value!r}, not a list of policies.", index=None)
    return [parse_policy(policy, index) for index, policy in enumerate(value)]
