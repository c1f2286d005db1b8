"""The shipped documentation cites only what a user can open (docs/design.md §1).

Every "docs/design.md §N" citation in code, docs and tests names a section that exists in
``docs/design.md``; nothing cites a file outside the repository or a tracker number.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"
SOURCE_DIRS = ("cortex_sessions", "example_project", "bench", "docs", "tests")
CITATION = re.compile(r"docs/design\.md (§[0-9][0-9.–§, ]*)")


def _shipped_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "pyproject.toml"]
    for name in SOURCE_DIRS:
        files += sorted(p for p in (ROOT / name).rglob("*") if p.suffix in {".py", ".md", ".html"})
    return files


def _sections() -> set[str]:
    """Section numbers of docs/design.md: ``"7"`` for "## 7." and ``"7.3"`` for "7.3 **…**"."""
    text = DESIGN.read_text(encoding="utf-8")
    numbers = set(re.findall(r"^## ([0-9]+)\.", text, re.MULTILINE))
    numbers |= set(re.findall(r"^([0-9]+\.[0-9]+) ", text, re.MULTILINE))
    return numbers


def test_design_document_is_shipped_with_numbered_sections():
    assert {"1", "2", "2.1", "7.3", "8.9", "10"} <= _sections()


def test_every_design_citation_names_an_existing_section():
    # A subsection must exist itself: "§4.3" is no citation of §4 (which has no subsections).
    sections = _sections()
    missing = []
    for path in _shipped_files():
        for match in CITATION.finditer(path.read_text(encoding="utf-8")):
            for number in re.findall(r"[0-9]+(?:\.[0-9]+)?", match.group(1)):
                if number not in sections:
                    missing.append(f"{path.relative_to(ROOT)}: §{number}")
    assert missing == []


@pytest.mark.parametrize(
    "pattern",
    [
        r"DESIGN(\.md| §)",  # the old, unshipped name of the specification
        r"\b[Ii]ssue #?[0-9]+",  # tracker numbers mean nothing to a user
        r"\.\./shared|seeds/",  # files outside the repository
    ],
)
def test_nothing_points_outside_the_repository(pattern):
    this_file = Path(__file__).resolve()
    hits = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in _shipped_files()
        if path != this_file
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(pattern, line)
    ]
    assert hits == []
