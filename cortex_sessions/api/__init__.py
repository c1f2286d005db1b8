"""The REST API of cortex_sessions (docs/design.md §7.3): DRF viewsets over the service layer.

Mount it with one include::

    path("api/cortex/", include("cortex_sessions.api.urls"))

Everything DRF-specific lives in this package, so the core never imports DRF.
"""
