"""The shipped documentation cites only what a user can open (docs/design.md §1).

Every "docs/design.md §N" citation in code, docs and tests names a section that exists in
``docs/design.md``; nothing cites a file outside the repository or a tracker number.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

from cortex_sessions import services, transfer

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


def test_the_import_export_page_describes_every_key_of_the_format():
    """Unknown keys are an import error, so the format table must name every key the import
    takes and the export writes (the lifecycle keys included, docs/design.md §11.1, §11.2)."""
    page = (ROOT / "docs" / "import-export.md").read_text(encoding="utf-8")
    described = set(re.findall(r"^\| `([a-z_\[\].]+)` \|", page, flags=re.MULTILINE))
    expected = set(transfer.CONVERSATION_KEYS) | {f"messages[].{k}" for k in transfer.MESSAGE_KEYS}
    assert described == expected


def _service_api_section() -> str:
    """README's "The service API" section, up to the next heading."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("### The service API\n")
    return text[start : text.index("\n#", start + 1)]


def test_the_readme_service_section_names_every_public_service():
    """Every name ``cortex_sessions.services`` exports is in README (an async twin through
    its sync name: the section says every one has an ``a``-prefixed twin)."""
    named = set(re.findall(r"`(\w+)", _service_api_section()))
    exported = set(services.__all__)
    twins = {name for name in exported if name.startswith("a") and name[1:] in exported}

    assert sorted(exported - twins - named) == []


def test_the_readme_service_table_shows_every_argument_with_its_real_default():
    """``name(a=, b=1)`` in the table lists every parameter of ``services.name``; a default it
    shows is the function's (``a=`` leaves one out; a required one may show an example)."""
    first_cells = [
        line.split(" | ", 1)[0]
        for line in _service_api_section().splitlines()
        if line.startswith("| `")
    ]
    calls = [call for cell in first_cells for call in re.findall(r"`(\w+)\(([^`]*)\)`", cell)]
    wrong = []
    for name, arguments in calls:
        if name not in services.__all__:
            continue
        parameters = inspect.signature(getattr(services, name)).parameters
        shown = dict(part.partition("=")[::2] for part in arguments.split(", ") if part)
        if set(shown) != set(parameters):
            wrong.append(f"{name}: shows {sorted(shown)}, takes {sorted(parameters)}")
        for key, value in shown.items():
            default = parameters[key].default if key in parameters else inspect.Parameter.empty
            shows_a_default = value and default is not inspect.Parameter.empty
            if shows_a_default and ast.literal_eval(value) != default:
                wrong.append(f"{name}: {key}={value}, the default is {default!r}")
    assert calls
    assert wrong == []
