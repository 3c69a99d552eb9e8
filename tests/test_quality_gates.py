"""Quality gates as tests, so that CI's one command (pytest) runs them: ruff's lint rules, the
import layering of the package (import-linter, configured in pyproject.toml), and the version
the console script reports. The tools come from the environment running the tests."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import PYPROJECT, ROOT, script, version

PACKAGE = ROOT / "caffe_lstm"


def _run(args: list[object], cwd: Path, env: dict[str, str] | None = None,
         timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _output(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"


def _lint_imports(package_parent: Path, config: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports over the caffe_lstm package found in ``package_parent`` (put first on the
    path, ahead of the editable install's finder), with the contracts of ``config``."""
    env = {**os.environ, "PYTHONPATH": str(package_parent)}
    return _run([script("lint-imports"), "--config", config, "--no-cache", "--no-logo"],
                cwd=package_parent, env=env)


def test_ruff_finds_nothing():
    """``ruff check`` over the whole project with the rules of [tool.ruff.lint]."""
    proc = _run([script("ruff"), "check", "--no-cache", "--output-format", "concise", "."],
                cwd=ROOT)
    assert proc.returncode == 0, _output(proc)


def test_every_package_directory_has_an_init():
    """import-linter (grimp) does not look inside a directory of the package that lacks an
    ``__init__.py`` (a namespace package nested in a regular one): its modules and their imports
    would be invisible to the contracts below, and an optional layer like ``(caffe_lstm.api)``
    would pass without being checked."""
    missing = sorted(
        str(folder.relative_to(ROOT)) for folder in [PACKAGE, *PACKAGE.rglob("*")]
        if folder.is_dir() and folder.name != "__pycache__" and any(folder.glob("*.py"))
        and not (folder / "__init__.py").exists())
    assert not missing, f"add an __init__.py to: {', '.join(missing)}"


def test_import_contracts_hold():
    """The layers and forbidden contracts of [tool.importlinter], over this checkout."""
    proc = _lint_imports(ROOT, PYPROJECT)
    assert proc.returncode == 0, _output(proc)


@pytest.mark.parametrize("target", [
    "caffe_lstm.analysis.shapes",  # a higher layer (both contracts)
    "caffe_lstm.feeds",            # outside the layers, forbidden to ops (forbidden contract)
])
def test_planted_upward_import_is_caught(tmp_path, target):
    """The contracts do catch a violation: a copy of the package with one ops module importing
    ``target`` fails lint-imports, which names that import (the module is planted in the copy
    only, so naming it also shows the copy was the one analysed)."""
    copy = tmp_path / "caffe_lstm"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    planted = next(p for p in sorted((copy / "ops").glob("*.py")) if p.name != "__init__.py")
    with planted.open("a", encoding="utf-8") as f:
        f.write(f"\nimport {target}  # planted by test_quality_gates\n")
    shutil.copy(PYPROJECT, tmp_path / "pyproject.toml")

    proc = _lint_imports(tmp_path, tmp_path / "pyproject.toml")
    assert proc.returncode != 0, _output(proc)
    assert f"caffe_lstm.ops.{planted.stem} -> {target}" in proc.stdout, _output(proc)


def test_console_script_version():
    proc = _run([script("caffe-lstm"), "--version"], cwd=ROOT)
    assert proc.returncode == 0, _output(proc)
    assert proc.stdout.strip() == f"caffe-lstm, version {version()}"
