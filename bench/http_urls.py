"""URLs of ``python -m bench.http``: the example project's (the API under ``api/cortex/``) and
the floor's plain views under ``floor/`` (:mod:`bench.http_floor`), in one process."""

from __future__ import annotations

from django.urls import include, path

from example_project.urls import urlpatterns as example_urlpatterns

from . import http_floor

urlpatterns = [path("floor/", include(http_floor.urlpatterns)), *example_urlpatterns]
