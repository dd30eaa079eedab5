"""The architecture page's map of the modules stays true: every module named once, nothing named that is not there.

The map is the text block under "The modules" in
docs/explanation/architecture.md. Its entries are the lines that begin
with a file (``name.py``) or a folder (``name/``) at two spaces per level
below the folder above them; deeper lines continue a description. A
folder's ``__init__.py`` is the folder itself, and the migrations are one
folder, not each of their files.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "django_openworkflow"
PAGE = ROOT / "docs" / "explanation" / "architecture.md"

ENTRY = re.compile(r"(?P<indent> *)(?P<name>[a-z_0-9]+(?:\.py|/))(?:\s|$)")
# A path to a file anywhere on the page: a module's (``store/queue.py``) or a test's (``tests/...``).
FILE_PATH = re.compile(r"(?<![\w/.<>-])(?P<path>(?:[a-z_]+/)+[a-z_0-9]+\.py)\b")


def the_map() -> list[str]:
    """The lines of the map's text block (its first line is ``django_openworkflow/``)."""
    text = PAGE.read_text()
    section = text[text.index("## The modules") :]
    block = section[section.index("```text\n") + len("```text\n") :]
    return block[: block.index("```")].splitlines()


def entries() -> list[str]:
    """Each entry of the map as a path under the package: ``store/queue.py``, ``store/backends/``."""
    lines = the_map()
    assert lines[0].startswith("django_openworkflow/"), "the map begins with the package"
    folders: list[str] = []  # the folders enclosing the current line, by level
    found = []
    for number, line in enumerate(lines[1:], 2):
        match = ENTRY.match(line)
        if match is None or not line.strip():
            continue
        level, spaces = divmod(len(match["indent"]), 2)
        if spaces or level == 0 or level > len(folders) + 1:
            continue  # a description's continuation
        assert line[len(match["indent"])] != " ", f"map line {number} is indented oddly: {line!r}"
        del folders[level - 1 :]
        path = "".join(folders) + match["name"]
        found.append(path)
        if path.endswith("/"):
            folders.append(match["name"])
    return found


def package_modules() -> set[str]:
    """Every module and package folder, relative to the package, as the map names them."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] == "migrations":
            continue
        folders = relative.parts[:-1]
        for depth in range(1, len(folders) + 1):
            names.add("".join(f"{part}/" for part in folders[:depth]))
        if path.name != "__init__.py":
            names.add(relative.as_posix())
    return names | {"migrations/"}


def test_the_map_names_every_module_and_folder_once():
    named = Counter(entries())
    twice = sorted(name for name, count in named.items() if count > 1)
    missing = sorted(package_modules() - set(named))
    assert twice == [], f"named more than once in the map: {twice}"
    assert missing == [], f"missing from the map in {PAGE.relative_to(ROOT)}: {missing}"


def test_the_map_names_nothing_that_is_not_there():
    stale = sorted(set(entries()) - package_modules())
    assert stale == [], f"the map names modules the package does not have: {stale}"


def test_every_file_the_page_names_exists():
    paths = {match["path"] for match in FILE_PATH.finditer(PAGE.read_text())}
    stale = sorted(path for path in paths if not (PACKAGE / path).is_file() and not (ROOT / path).is_file())
    assert stale == [], f"the page names files that do not exist: {stale}"


def test_each_test_folder_is_an_area_of_the_package():
    # The page says the tests are grouped as the package is: tests/<area>/ tests django_openworkflow/<area>/.
    helpers = {"fixtures", "upstream"}
    # Folders of tests (tests/artifacts, the browser tests' screenshots, holds none).
    folders = {
        path.name
        for path in (ROOT / "tests").iterdir()
        if path.is_dir() and path.name not in helpers and any(path.glob("test_*.py"))
    }
    areas = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").is_file()}
    assert folders - areas == set(), "test folders named after no area of the package"
