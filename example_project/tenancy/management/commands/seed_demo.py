"""``manage.py seed_demo``: demo users for trying the API (see docs/api.md)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from example_project.tenancy.models import Membership

#: (username, org, is_org_admin); ``make demo`` spreads conversations over the members.
DEMO_USERS = [
    ("alice", "acme", True),
    ("bob", "acme", False),
    ("carol", "globex", False),
    ("dave", "acme", False),
    ("erin", "globex", True),
    ("frank", "globex", False),
]


class Command(BaseCommand):
    """Create (or reset) the demo users and their memberships; idempotent."""

    help = (
        "Create demo users: alice (acme admin), bob and dave (acme members), erin (globex "
        "admin), carol and frank (globex members)."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--password", default="demo", help="Password of every demo user.")

    def handle(self, *args: Any, password: str, **options: Any) -> None:
        User = get_user_model()
        for username, org, is_admin in DEMO_USERS:
            user, _ = User.objects.get_or_create(username=username)
            user.set_password(password)
            user.save()
            Membership.objects.update_or_create(
                user=user, defaults={"org": org, "is_org_admin": is_admin}
            )
            role = "admin" if is_admin else "member"
            self.stdout.write(f"{username}: {role} of {org} (user id {user.pk})")
