"""The example project's front page: where ``/`` of ``make demo`` lands."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from example_project.tenancy.management.commands.seed_demo import DEMO_USERS

#: The password ``make demo`` gives every demo user (``demo_setup``'s default).
DEMO_PASSWORD = "demo"


def front_page(request: HttpRequest) -> HttpResponse:
    """``GET /``: links to the API browser, Swagger UI, the schema, the API log-in and the
    admin, with the demo log-ins (README "Try it: one command").

    Returns a 200 HTML page; it reads no database, so it answers before ``demo_setup`` too.
    """
    logins = [
        {"username": name, "role": ("admin" if is_admin else "member"), "org": org}
        for name, org, is_admin in DEMO_USERS
    ]
    return render(request, "demo/index.html", {"logins": logins, "password": DEMO_PASSWORD})
