"""Organization membership of the example host's users."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Membership(models.Model):
    """A user's organization, and whether the user administers it (one org per user)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="membership"
    )
    org = models.SlugField(max_length=100, help_text="Organization slug, e.g. 'acme'.")
    is_org_admin = models.BooleanField(
        default=False, help_text="Org admins work at the org level and see all its sessions."
    )

    def __str__(self) -> str:
        role = "admin" if self.is_org_admin else "member"
        return f"{self.user} ({role} of {self.org})"
