"""The test suite's own layout: what several test modules share lives in tests/helpers.py (plain
functions) and tests/conftest.py (fixtures), and no test module imports another (a test module
imported elsewhere runs its tests twice and couples the two files' private helpers)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers import ROOT

TESTS = ROOT / "tests"
#: The modules of tests/ that hold no tests.
SHARED = {"__init__.py", "conftest.py", "helpers.py"}


def imported_modules(source: str) -> set[str]:
    """Every module an import statement of ``source`` names, those inside functions included;
    a relative import is spelled ``tests.<name>`` (tests/ is a package)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ("tests." + (node.module or "")).rstrip(".") if node.level else node.module
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def imported_test_modules(names: set[str]) -> list[str]:
    """The names among ``names`` that are test modules or the conftest."""
    return sorted(name for name in names
                  if name.split(".")[-1].startswith("test_")
                  or name.split(".")[-1] == "conftest")


@pytest.mark.parametrize("path", sorted(TESTS.glob("*.py")), ids=lambda p: p.name)
def test_no_test_module_imports_another(path: Path):
    assert imported_test_modules(imported_modules(path.read_text(encoding="utf-8"))) == []


def test_the_only_helper_modules_are_helpers_and_conftest():
    helpers = {p.name for p in TESTS.glob("*.py") if not p.name.startswith("test_")}
    assert helpers == SHARED


@pytest.mark.parametrize("source", [
    "from tests.test_cli import run_cli",
    "from .test_cli import run_cli",
    "import tests.test_cli",
    "from tests import test_cli",
    "from . import test_cli",
    "def f():\n    from tests.test_trt_emit import random_feeds\n",
    "from tests.conftest import ROOT",
])
def test_the_check_sees_every_spelling(source):
    assert imported_test_modules(imported_modules(source)) != []


def test_the_check_allows_the_helpers():
    assert imported_test_modules(imported_modules(
        "from tests.helpers import run_cli\nimport numpy\nfrom . import helpers\n")) == []
