"""WSGI application of ``python -m bench.http`` (gunicorn ``bench.http_wsgi:application``)."""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.http_settings")
application = get_wsgi_application()
