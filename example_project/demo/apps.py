from __future__ import annotations

from django.apps import AppConfig


class DemoConfig(AppConfig):
    """Holds the ``demo_setup`` command; no models."""

    name = "example_project.demo"
    label = "demo"
