"""Shared fixtures: the in-process CLI runner and the golden-file check (plain helpers live in
tests/helpers.py)."""

from __future__ import annotations

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
