"""``manage.py demo_setup``: demo users and real conversations for the example project.

``make demo`` runs ``migrate``, this command and ``runserver``. This command:

1. creates the demo users and their orgs (``seed_demo``: acme and globex, an admin and two
   members each) and a superuser ``admin`` for Django admin, all with the password ``demo``;
2. converts the first N conversations of the Chit-Chat corpus to the import format
   (:mod:`example_project.demo.chitchat`) and spreads them round-robin over the members, in one
   file per member;
3. imports each file with ``cortex_sessions_import`` as sessions of agent ``chitchat`` at the
   member's scope ``org=<org>/user=<pk>``; conversations imported before are skipped, so
   running it again adds only what is new;
4. makes each member's oldest demo session their default, if they have none;
5. prints the URLs, the log-ins and how many imported conversations each log-in sees.

It serves nothing, so tests can run it.
"""

from __future__ import annotations

import dataclasses
import io
import os
import tempfile
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from cortex_sessions import services
from cortex_sessions.models import ImportedConversation
from cortex_sessions.scope import scope_q
from cortex_sessions.transfer import dump_conversation
from example_project.demo.chitchat import AGENT_ID, read_conversations
from example_project.tenancy.management.commands.seed_demo import DEMO_USERS
from example_project.tenancy.models import Membership

DEFAULT_CONVERSATIONS = 300
CORPUS_SIZE = 7168


def _count(value: str) -> int | None:
    """``--conversations``: a positive number, or ``all`` (``None``)."""
    if value.strip().lower() == "all":
        return None
    try:
        number = int(value)
    except ValueError:
        raise CommandError(f"--conversations must be a number or 'all', not {value!r}.") from None
    if number < 1:
        raise CommandError("--conversations must be at least 1.")
    return number


class Command(BaseCommand):
    help = (
        "Create the demo users (password 'demo') and import the first N Chit-Chat conversations "
        "as sessions of agent 'chitchat', spread over the members of two orgs. Idempotent."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--conversations",
            default=os.environ.get("DEMO_CONVERSATIONS") or str(DEFAULT_CONVERSATIONS),
            help=(
                f"How many conversations to import, or 'all' ({CORPUS_SIZE:,}); default "
                f"$DEMO_CONVERSATIONS or {DEFAULT_CONVERSATIONS}."
            ),
        )
        parser.add_argument("--password", default="demo", help="Password of the demo users.")
        parser.add_argument(
            "--base-url", default="http://127.0.0.1:8000", help="Base URL printed at the end."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        limit = _count(str(options["conversations"]))
        verbosity = options["verbosity"]
        quiet = {"verbosity": verbosity, "stdout": self.stdout, "stderr": self.stderr}
        members = self._users(options["password"], verbosity)

        with tempfile.TemporaryDirectory(prefix="cortex-demo-") as directory:
            paths = [Path(directory) / f"{member.user.username}.jsonl" for member in members]
            handles = [path.open("w", encoding="utf-8") for path in paths]
            try:
                total = 0
                for index, conversation in enumerate(read_conversations(limit)):
                    handles[index % len(handles)].write(dump_conversation(conversation))
                    total = index + 1
            finally:
                for handle in handles:
                    handle.close()
            if verbosity >= 1:
                self.stdout.write(
                    f"Importing {total:,} Chit-Chat conversations as agent {AGENT_ID!r} "
                    f"for {len(members)} members ..."
                )
            failures = []
            for member, path in zip(members, paths, strict=True):
                scope = self._scope(member)
                if verbosity >= 1:
                    self.stdout.write(f"{member.user.username} ({scope}):")
                try:
                    call_command(
                        "cortex_sessions_import", str(path), agent_id=AGENT_ID, scope=scope, **quiet
                    )
                except CommandError as exc:
                    failures.append(f"{member.user.username}: {exc}")
        self._defaults(members)
        if verbosity >= 1:
            self._banner(options["base_url"].rstrip("/"), options["password"])
        if failures:
            raise CommandError("Some conversations were not imported:\n" + "\n".join(failures))

    # -- steps ------------------------------------------------------------------------------------

    def _users(self, password: str, verbosity: int) -> list[Membership]:
        """The demo users (via ``seed_demo``) and a superuser; returns the members, in order."""
        out = self.stdout if verbosity >= 1 else io.StringIO()
        call_command("seed_demo", password=password, stdout=out)
        User = get_user_model()
        admin, _ = User.objects.get_or_create(username="admin")
        admin.is_staff = admin.is_superuser = True
        admin.set_password(password)
        admin.save()
        usernames = [name for name, _org, is_admin in DEMO_USERS if not is_admin]
        memberships = {
            m.user.username: m
            for m in Membership.objects.select_related("user").filter(user__username__in=usernames)
        }
        return [memberships[name] for name in usernames]

    @staticmethod
    def _scope(membership: Membership) -> str:
        return f"org={membership.org}/user={membership.user_id}"

    def _defaults(self, members: list[Membership]) -> None:
        """Make each member's oldest demo session the default, unless one exists."""
        for member in members:
            scope = self._scope(member)
            filters = services.SessionFilters(agent_id=AGENT_ID, exact=True)
            defaults = dataclasses.replace(filters, default_only=True)
            if services.count_sessions(scope=scope, filters=defaults):
                continue
            oldest = services.list_sessions(
                scope=scope, filters=filters, ordering="created_at", limit=1
            )
            if oldest:
                services.make_default(scope=scope, session_id=oldest[0].pk)

    def _banner(self, base: str, password: str) -> None:
        lines = [
            "",
            self.style.SUCCESS("The demo is ready."),
            f"  Admin        {base}/admin/          (log in as admin / {password})",
            f"  API          {base}/api/cortex/sessions/",
            f"  Swagger UI   {base}/api/docs/       (log in first, below)",
            f"  Schema       {base}/api/schema/",
            f"  API log-in   {base}/api/auth/login/?next=/api/docs/",
            "",
            f"Log-ins (password {password!r}). The API takes HTTP Basic, or the cookie of the API",
            "log-in above (members and org admins) or of /admin/ (admin only); sessions are",
            "the imported Chit-Chat conversations each log-in sees:",
            "  admin    superuser for /admin/ (no org, so the API answers 403 no_scope)",
        ]
        memberships = {
            m.user.username: m
            for m in Membership.objects.select_related("user").filter(
                user__username__in=[name for name, _org, _admin in DEMO_USERS]
            )
        }
        for name, org, is_admin in DEMO_USERS:
            member = memberships[name]
            scope = f"org={org}" if is_admin else self._scope(member)
            count = (
                ImportedConversation.objects.filter(scope_q(scope), agent_id=AGENT_ID)
                .order_by()
                .count()
            )
            role = "admin " if is_admin else "member"
            lines.append(f"  {name:<8} {role} of {org:<7} scope {scope:<22} {count:>5,} sessions")
        lines += [
            "",
            f"Try:  curl -u bob:{password} '{base}/api/cortex/sessions/?search=hey&limit=5'",
            "",
        ]
        self.stdout.write("\n".join(lines))
