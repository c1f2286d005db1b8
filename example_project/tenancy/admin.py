from __future__ import annotations

from django.contrib import admin

from .models import Membership


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    """Memberships: who belongs to which org, and who administers it."""

    list_display = ["user", "org", "is_org_admin"]
    list_filter = ["is_org_admin", "org"]
    search_fields = ["user__username", "org"]
