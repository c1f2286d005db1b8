"""URLs of the API. Mount with ``path("api/cortex/", include("cortex_sessions.api.urls"))``.

URL names (namespace ``cortex_sessions``): ``session-list``, ``session-detail``,
``session-count``, ``session-resolve``, ``session-make-default``, ``session-messages``,
``session-reference-candidates``, ``session-references-prepare``, ``session-export``,
``erasure-list`` (POST), ``erasure-detail``.
"""

from __future__ import annotations

from rest_framework.routers import SimpleRouter

from .views import ErasureViewSet, SessionViewSet

app_name = "cortex_sessions"

router = SimpleRouter()
router.register("sessions", SessionViewSet, basename="session")
router.register("erasures", ErasureViewSet, basename="erasure")

urlpatterns = router.urls
