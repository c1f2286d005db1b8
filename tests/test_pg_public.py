"""The PostgreSQL hot paths (``services/_pg.py``, ``_pg_run.py``, ``_pg_lists.py``, the LangGraph
saver's ``integrations/langgraph/_pg_reads.py``) use public APIs of
psycopg and Django only (docs/design.md §14): no private module, no name starting with ``_``
taken from either package or read off their objects, no libpq-level sends, no model internals
beyond the documented ``Model._meta`` and ``Model.from_db``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SERVICES = Path(__file__).resolve().parent.parent / "cortex_sessions" / "services"
MODULES = ("_pg.py", "_pg_run.py", "_pg_lists.py")

#: Underscore names that are public API: the documented Model ``_meta`` API.
ALLOWED_PRIVATE_ATTRIBUTES = {"_meta"}

#: Public-looking names that are libpq-level or model internals all the same.
FORBIDDEN_NAMES = {
    "pgconn",
    "send_query_params",
    "ModelState",
    "pre_init",
    "post_init",
    "Transformer",
    "generators",
}

FOREIGN = ("django", "psycopg")


#: Hand-written SQL outside services/: the LangGraph saver's one-statement reads.
LANGGRAPH_READS = SERVICES.parent / "integrations" / "langgraph" / "_pg_reads.py"


def _tree(name: str) -> ast.Module:
    return ast.parse((SERVICES / name).read_text(), filename=name)


def _private_references(tree: ast.Module) -> list[str]:
    """Every reference in ``tree`` to a private name of psycopg or Django."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in FOREIGN:
                parts = node.module.split(".")
                if any(part.startswith("_") for part in parts) or node.module == (
                    "django.db.models.base"
                ):
                    found.append(f"from {node.module}")
                found += [
                    f"{node.module}.{alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_") or alias.name in FORBIDDEN_NAMES
                ]
        elif isinstance(node, ast.Import):
            found += [
                alias.name
                for alias in node.names
                if alias.name.split(".")[0] in FOREIGN
                and any(part.startswith("_") for part in alias.name.split("."))
            ]
        elif isinstance(node, ast.Attribute):
            # Any underscore attribute read off an object: the module's own private names are
            # module-level functions and constants, never attributes.
            if (
                node.attr.startswith("_") and node.attr not in ALLOWED_PRIVATE_ATTRIBUTES
            ) or node.attr in FORBIDDEN_NAMES:
                found.append(f".{node.attr}")
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            found.append(node.id)
    return found


@pytest.mark.parametrize("name", MODULES)
def test_the_hot_paths_reference_no_private_name_of_psycopg_or_django(name):
    assert _private_references(_tree(name)) == []


def test_the_langgraph_reads_reference_no_private_name_of_psycopg_or_django():
    tree = ast.parse(LANGGRAPH_READS.read_text(), filename=LANGGRAPH_READS.name)
    assert _private_references(tree) == []


@pytest.mark.parametrize(
    "source",
    [
        "from django.db.models.base import ModelState",
        "from psycopg._cursor_base import BaseCursor",
        "import psycopg._queries",
        "from psycopg import _wrappers",
        "connection.connection.pgconn.send_query_params(b'', None)",
        "cursor._query",
        "instance.__dict__",
        "from django.db.models.signals import post_init",
    ],
)
def test_the_check_finds_each_kind_of_private_reference(source):
    assert _private_references(ast.parse(source)) != []


def test_the_hot_paths_are_less_than_half_their_former_size():
    """``services/_pg.py`` was 1,236 lines, half of them mirroring psycopg's cursor code."""
    assert len((SERVICES / "_pg.py").read_text().splitlines()) < 618
