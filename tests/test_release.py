"""The release check: the sdist and the wheel build, carry every file the app needs, and pass ``twine check``.

The app's data files (migrations, templates, static files, compiled
translations, ``py.typed``) reach an install only if the build puts them in;
a missing one shows only once the package is installed from PyPI. This builds
both as a release would (``python -m build``: the sdist, then the wheel from
the sdist) from a copy of the files a build reads, so a build running beside
it (tox's) cannot mix its ``egg-info`` with this one's.

Without isolation when this environment has what ``pyproject.toml`` asks for
(the ``release`` extra installs it), so the test needs no network; otherwise
in an isolated environment, which fetches setuptools and wheel from the index.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

import django_openworkflow
from tests.conftest import CEILING

# find_spec, not importorskip: a checkout's build/ folder (setuptools' output, on sys.path through the
# repository root) imports as an empty namespace package named "build".
_build = importlib.util.find_spec("build")
if _build is None or _build.origin is None:
    pytest.skip("the release check needs the build package (the [release] extra)", allow_module_level=True)

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "django_openworkflow"
VERSION = django_openworkflow.__version__
# What a build reads besides the package (setup.cfg: long_description, license_files; MANIFEST.in).
PROJECT_FILES = ("setup.cfg", "pyproject.toml", "MANIFEST.in", "README.md", "CHANGELOG.md", "LICENSE")


def data_files() -> list[str]:
    """Every file of the package an install needs that is not Python source, as paths inside the package."""
    wanted = [PACKAGE / "py.typed"]
    wanted += PACKAGE.glob("migrations/*.py")
    wanted += PACKAGE.glob("templates/**/*.html")
    wanted += [path for path in PACKAGE.glob("static/**/*") if path.is_file()]
    wanted += PACKAGE.glob("locale/*/LC_MESSAGES/*.mo")
    return sorted(str(path.relative_to(ROOT)) for path in wanted)


def can_build_offline() -> bool:
    """Whether this environment has pyproject.toml's build requirements (setuptools>=69, wheel)."""
    try:
        setuptools = tuple(int(part) for part in metadata.version("setuptools").split(".")[:1])
        metadata.version("wheel")
    except (metadata.PackageNotFoundError, ValueError):
        return False
    return setuptools >= (69,)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("source")
    for name in PROJECT_FILES:
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, source / name)
    shutil.copytree(PACKAGE, source / PACKAGE.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path_factory.mktemp("dist")
    isolation = ["--no-isolation"] if can_build_offline() else []
    built = subprocess.run(
        [sys.executable, "-m", "build", *isolation, "--outdir", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, f"python -m build failed:\n{built.stdout[-3000:]}\n{built.stderr[-3000:]}"
    # setuptools' "Package ... is absent from the `packages` configuration": a data folder it may stop installing.
    warnings = [line for line in (built.stdout + built.stderr).splitlines() if line.startswith("WARNING Package")]
    assert not warnings, "\n".join(warnings)
    return out


def test_the_sdist_and_the_wheel_are_built_for_this_version(dist):
    names = sorted(path.name for path in dist.iterdir())
    assert names == [f"django_openworkflow-{VERSION}-py3-none-any.whl", f"django_openworkflow-{VERSION}.tar.gz"]


def test_the_sdist_carries_the_data_files_and_the_changelog(dist):
    with tarfile.open(dist / f"django_openworkflow-{VERSION}.tar.gz") as sdist:
        prefix = f"django_openworkflow-{VERSION}/"
        inside = {name.removeprefix(prefix) for name in sdist.getnames()}
    expected = data_files() + ["CHANGELOG.md", "README.md", "setup.cfg", "pyproject.toml"]
    expected += ["LICENSE"] if (ROOT / "LICENSE").exists() else []
    assert not [name for name in expected if name not in inside]
    assert not [name for name in inside if name.startswith("tests/")]  # no half test suite


def test_the_wheel_carries_the_data_files(dist):
    with zipfile.ZipFile(dist / f"django_openworkflow-{VERSION}-py3-none-any.whl") as wheel:
        inside = set(wheel.namelist())
        metadata_text = wheel.read(f"django_openworkflow-{VERSION}.dist-info/METADATA").decode()
    assert not [name for name in data_files() if name not in inside]
    assert any(name.endswith(".mo") for name in inside)  # compiled: installing needs no gettext
    assert not [name for name in inside if "__pycache__" in name or name.startswith("tests/")]
    assert f"Version: {VERSION}\n" in metadata_text


def test_twine_check_passes(dist):
    pytest.importorskip("twine", reason="twine check needs twine (the [release] extra)")
    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, sorted(dist.iterdir()))],
        capture_output=True,
        text=True,
        timeout=CEILING,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_changelog_names_this_version_first_in_keep_a_changelog_form():
    text = (ROOT / "CHANGELOG.md").read_text()
    versions = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2}|Unreleased)$", text, re.MULTILINE)
    headings = re.findall(r"^## .*$", text, re.MULTILINE)
    assert len(versions) == len(headings), f"a version heading is not '## [X.Y.Z] - YYYY-MM-DD': {headings}"
    assert versions[0][0] == VERSION, f"__version__ is {VERSION}, the changelog's newest is {versions[0][0]}"
    assert versions[-1][0] == "0.1.0"
    assert [v for v, _ in versions] == sorted((v for v, _ in versions), key=lambda v: tuple(map(int, v.split("."))))[
        ::-1
    ]
    assert all(date != "Unreleased" for _, date in versions[1:]), "only the newest version may be unreleased"
    sections = set(re.findall(r"^### (.*)$", text, re.MULTILINE))
    assert sections <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}, sections
