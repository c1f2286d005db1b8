"""A tiny tenancy model for the example host: which organization a user belongs to.

Each user has at most one :class:`~example_project.tenancy.models.Membership` naming an org
and whether the user administers it. :func:`~example_project.tenancy.resolver.org_scope_resolver`
turns that into the request's scope: ``org=<org>/user=<pk>`` for a member, ``org=<org>`` for an
org admin, who therefore sees every session of the org (docs/design.md §2.5).
"""
