from __future__ import annotations

from django.apps import AppConfig


class TenancyConfig(AppConfig):
    """The example host's tenancy app."""

    name = "example_project.tenancy"
    label = "tenancy"
    default_auto_field = "django.db.models.BigAutoField"
