"""The PostgreSQL hot paths (every module with hand-written SQL for one: ``services/_pg*.py``, the
keyed appends, the runtime adapters' one-statement reads and writes) use public APIs of
psycopg and Django only (docs/design.md §14): no private module, no name starting with ``_``
taken from either package or read off their objects, no libpq-level sends, no model internals
beyond the documented ``Model._meta`` and ``Model.from_db``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "cortex_sessions"
SERVICES = PACKAGE / "services"
#: Every module with hand-written SQL on a PostgreSQL hot path, relative to the package.
MODULES = (
    "services/_pg.py",
    "services/_pg_run.py",
    "services/_pg_lists.py",
    "services/_pg_page.py",
    "services/_pg_context.py",
    "services/_pop_pg.py",
    "services/keyed_append.py",
    "integrations/openai_agents_history.py",
    "integrations/block_history.py",
    "integrations/adk/store_pg.py",
    "integrations/langgraph/_pg_reads.py",
    "integrations/langgraph/_pg_writes.py",
)

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


def _tree(name: str) -> ast.Module:
    return ast.parse((PACKAGE / name).read_text(), filename=name)


def _private_references(tree: ast.Module) -> list[str]:
    """Every reference in ``tree`` to a private name of psycopg or Django."""
    found = []
    # The package's own modules (bound by relative imports) may share their private helpers.
    own = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level > 0
        for alias in node.names
    }
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
            if isinstance(node.value, ast.Name) and node.value.id in own:
                if node.attr in FORBIDDEN_NAMES:
                    found.append(f".{node.attr}")
            elif (
                node.attr.startswith("_") and node.attr not in ALLOWED_PRIVATE_ATTRIBUTES
            ) or node.attr in FORBIDDEN_NAMES:
                found.append(f".{node.attr}")
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            found.append(node.id)
    return found


@pytest.mark.parametrize("name", MODULES)
def test_the_hot_paths_reference_no_private_name_of_psycopg_or_django(name):
    assert _private_references(_tree(name)) == []


def test_every_module_with_hot_path_sql_is_checked():
    """A new PostgreSQL module (``pg`` in its name, as ``_pg_lists``, ``store_pg``) outside the
    checked list would escape the check."""
    checked = {PACKAGE / name for name in MODULES}
    unchecked = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if "migrations" not in path.parts and path not in checked and "pg" in path.stem.split("_")
    ]
    assert unchecked == []


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
