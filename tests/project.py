"""The project's own metadata and tools, for the packaging and quality-gate tests."""

from __future__ import annotations

import sysconfig
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: build (a test dependency) brings tomli there
    import tomli as tomllib

from tests.conftest import ROOT

PYPROJECT = ROOT / "pyproject.toml"


def pyproject() -> dict:
    """pyproject.toml, parsed."""
    return tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))


def version() -> str:
    """The version pyproject.toml declares (what ``caffe-lstm --version`` must print)."""
    return pyproject()["project"]["version"]


def script(name: str) -> Path:
    """A console script of the environment running the tests (ruff, lint-imports,
    caffe-lstm): the same installation as the interpreter, whatever is first on PATH."""
    path = Path(sysconfig.get_path("scripts")) / name
    assert path.exists(), f"{name} is not installed beside {path.parent}: pip install -e '.[test]'"
    return path
