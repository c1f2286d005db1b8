from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from example_project.demo.views import front_page

urlpatterns = [
    path("", front_page, name="front-page"),  # links to all below, with the demo log-ins
    path("admin/", admin.site.urls),
    path("api/cortex/", include("cortex_sessions.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    # DRF's log-in and log-out pages: how the demo's members and org admins (who are not staff,
    # so /admin/ turns them away) get a session cookie for Swagger UI and the browsable API.
    path("api/auth/", include("rest_framework.urls")),
]
