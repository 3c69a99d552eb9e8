"""Shared fixtures: paths to the samples and to ../shared/corpus, and a CLI runner."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from caffe_lstm.cli import cli

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
CORPUS = ROOT.parent / "shared" / "corpus"


def corpus_files() -> list[Path]:
    """Every prototxt of ../shared/corpus, or none when it is absent (a user's clone)."""
    return sorted(CORPUS.rglob("*.prototxt")) if CORPUS.is_dir() else []


def needs_corpus() -> pytest.MarkDecorator:
    return pytest.mark.skipif(not CORPUS.is_dir(),
                              reason="../shared/corpus not present (a user's clone); CI has it")


@pytest.fixture
def invoke():
    """Runs the CLI in-process; returns the click Result (stdout and stderr kept apart)."""
    runner = CliRunner()

    def _invoke(*args: object):
        return runner.invoke(cli, [str(a) for a in args], catch_exceptions=False)

    return _invoke


def sample(name: str) -> tuple[Path, Path]:
    """(prototxt, caffemodel) of a sample net."""
    folder = SAMPLES / name
    return folder / f"{name}.prototxt", folder / f"{name}.caffemodel"
