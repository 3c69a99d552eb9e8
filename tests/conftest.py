"""Shared fixtures: the in-process CLI runner and the golden-file check (plain helpers live in
tests/helpers.py)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from caffe_lstm.cli import cli
from tests.helpers import ROOT


@pytest.fixture
def invoke():
    """Runs the CLI in-process; returns the click Result (stdout and stderr kept apart)."""
    runner = CliRunner()

    def _invoke(*args: object):
        return runner.invoke(cli, [str(a) for a in args], catch_exceptions=False)

    return _invoke


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true",
                     help="Rewrite tests/golden/* from the current output.")


@pytest.fixture
def golden(request):
    """Compares text with tests/golden/<name> (or rewrites it with --update-golden)."""
    update = request.config.getoption("--update-golden")

    def _check(name: str, text: str) -> None:
        path = ROOT / "tests" / "golden" / name
        if update:
            path.parent.mkdir(exist_ok=True)
            path.write_text(text)
        assert path.exists(), f"{path} is missing: run pytest --update-golden and review it"
        assert text == path.read_text(), f"{name} differs: review, then pytest --update-golden"

    return _check


class ScratchFolders:
    """Folders for a module's shared fixtures, made under one base that goes when the module
    ends: the suite writes gigabytes of engines and models, and pytest would keep every
    tmp_path_factory folder until the session ends (a full run peaked near 20 GB)."""

    def __init__(self, base: Path) -> None:
        self.base = base

    def mktemp(self, name: str) -> Path:
        return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.base))


@pytest.fixture(scope="module")
def module_scratch(request, tmp_path_factory):
    base = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
    yield ScratchFolders(base)
    shutil.rmtree(base, ignore_errors=True)
