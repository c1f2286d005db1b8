"""The source distribution holds what its own tests and README need (MANIFEST.in).

An unpacked sdist must run ``pytest`` as a clone does (``tests/`` with its ``conftest.py``,
settings and subfolders, the example project and ``manage.py`` the demo and browser tests serve,
``bench/`` that ``tests/test_bench.py`` imports) and every relative link of its README must open
(the ``docs/`` pages). The wheel, by contrast, ships only ``cortex_sessions/``.

The sdist looked at is the one ``.ci/run`` built next to ``$CORTEX_WHEEL``, or, without it, one
built here from a copy of the source tree with ``python -m build --sdist`` (the ``release``
extra); without either the test is skipped.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.servers import ROOT

#: Files at the top of the source tree the sdist must hold.
TOP_LEVEL_FILES = ("CHANGELOG.md", "LICENSE", "README.md", "manage.py", "pyproject.toml")
#: Folders the sdist must hold whole (less caches, local databases and bench/results).
FOLDERS = ("docs", "example_project", "tests", "bench")
#: What a build from a copy of the tree leaves behind: not source, never shipped.
NOT_SOURCE = (
    ".git",
    ".venv*",
    ".nox",
    "dist",
    "build",
    "*.egg-info",
    "__pycache__",
    "*.py[cod]",
    "*.sqlite3*",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
    ".ci-*",
    "results",
)


def _shipped(path: Path) -> bool:
    relative = path.relative_to(ROOT)
    return not (
        "__pycache__" in relative.parts
        or path.suffix in {".pyc", ".pyo"}
        or ".sqlite3" in path.name
        or relative.parts[:2] == ("bench", "results")
    )


@pytest.fixture(scope="module")
def sdist_names(tmp_path_factory) -> set[str]:
    """The sdist's file names, relative to its top folder (``docs/design.md``)."""
    wheel = os.environ.get("CORTEX_WHEEL")
    if wheel:
        archives = sorted(Path(wheel).resolve().parent.glob("cortex_sessions-*.tar.gz"))
        assert archives, f"no sdist next to CORTEX_WHEEL={wheel}"
        archive = archives[-1]
    elif importlib.util.find_spec("build") is None:
        pytest.skip(
            'needs CORTEX_WHEEL or build, from the release extra: pip install -e ".[release]"'
        )
    else:
        source = tmp_path_factory.mktemp("source") / "tree"
        shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*NOT_SOURCE))
        out = tmp_path_factory.mktemp("dist")
        done = subprocess.run(
            [sys.executable, "-m", "build", "--sdist", "--outdir", str(out), str(source)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        (archive,) = out.glob("cortex_sessions-*.tar.gz")
    with tarfile.open(archive) as tar:
        return {
            name.split("/", 1)[1]
            for name in tar.getnames()
            if "/" in name and tar.getmember(name).isfile()
        }


def test_the_sdist_holds_the_tests_and_everything_they_use(sdist_names):
    expected = set(TOP_LEVEL_FILES)
    for folder in FOLDERS:
        expected |= {
            path.relative_to(ROOT).as_posix()
            for path in (ROOT / folder).rglob("*")
            if path.is_file() and _shipped(path)
        }

    assert sorted(expected - sdist_names) == []
    assert {"tests/conftest.py", "tests/settings.py", "tests/api/__init__.py"} <= sdist_names


def test_every_relative_link_of_the_readme_opens_in_the_sdist(sdist_names):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = {
        target.split("#", 1)[0]
        for target in re.findall(r"\]\(([^)\s]+)\)", readme)
        if not re.match(r"[a-z]+:|#", target)
    }

    assert targets  # docs/design.md at least
    assert sorted(targets - sdist_names) == []
