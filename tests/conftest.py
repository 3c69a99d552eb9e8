"""Shared fixtures: paths to the samples and to ../shared/corpus, and a CLI runner."""

from __future__ import annotations

import subprocess
import sys
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


#: How each train/test net of the corpus is read as its deploy graph (docs/corpus.md): the
#: stages that select its test-time data layers and model variant, and --shape for what its
#: HDF5 files or Python reader would give (T and N as the nets' own Reshapes fix them).
CORPUS_TRAIN_NETS = {
    "examples__coco_caption__lrcn.prototxt": (
        "--stage", "test-on-val", "--stage", "factored", "--stage", "2-layer",
        "--shape", "cont_sentence:20x100", "--shape", "input_sentence:20x100"),
    "examples__coco_caption__lstm_language_model.prototxt": (
        "--stage", "test-on-val",
        "--shape", "cont_sentence:20x100", "--shape", "input_sentence:20x100"),
    "examples__LRCN_activity_recognition__train_test_lstm_RGB.prototxt": (
        "--stage", "test-on-test", "--shape", "data:48x3x227x227", "--shape", "clip_markers:48"),
    "examples__s2vt__s2vt.prototxt": (
        "--stage", "test-on-val", "--stage", "factored", "--stage", "2-layer",
        "--shape", "cont_sentence:80x32", "--shape", "input_sentence:80x32",
        "--shape", "stage_indicator:80x32", "--shape", "frame_fc7:80x32x4096"),
}


def corpus_options(path: Path) -> tuple[str, ...]:
    """The selection options a corpus file is read with (none for a deploy net)."""
    return CORPUS_TRAIN_NETS.get(path.name, ())


def needs_corpus() -> pytest.MarkDecorator:
    return pytest.mark.skipif(
        not CORPUS.is_dir(),
        reason="the corpus of public prototxts is not beside this clone (CI has it)")


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


def run_cli(*args: object, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The real command in a subprocess (``python -m caffe_lstm``): exit status and stderr
    exactly as a user sees them, traceback or not."""
    return subprocess.run([sys.executable, "-m", "caffe_lstm", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def net_with_weights(tmp_path: Path, text: str, seed: int = 0):
    """The net of prototxt ``text`` with seeded synthetic weights, read back from a real
    caffemodel (written to ``tmp_path``); returns its graph."""
    from caffe_lstm.frontend.caffe_writer import write_caffemodel
    from caffe_lstm.frontend.loader import load_net
    from caffe_lstm.synthetic import synthetic_weights

    prototxt, weights = tmp_path / "net.prototxt", tmp_path / "net.caffemodel"
    prototxt.write_text(text)
    write_caffemodel(weights, synthetic_weights(load_net(prototxt).graph, seed))
    loaded = load_net(prototxt, weights)
    assert loaded.missing_weights == []
    return loaded.graph
