"""What a process imports (issue 25: the whole ``caffe-lstm run`` process against Caffe's).

``caffe-lstm run`` with numpy imports the reader, the rewrite and numpy's executor, nothing of
the other commands: not the serving stack (urllib, http, ssl, email), not verify's columns, the
caffemodel writer, the weight layouts, ``weights init``'s synthesis, onnx, onnxruntime or
TensorRT, and not importlib.metadata (only installed plugins and ``__version__`` need it).
``import caffe_lstm`` imports none of its names until one is used (PEP 562), the command
group loads a command's module only when that command is used, and the garbage collector waits
while it is imported (cli/startup.py).

Each check runs the real entry point (``python -m caffe_lstm``, through runpy) in a fresh
interpreter and reads ``sys.modules`` after the command has exited.
"""

from __future__ import annotations

import ast
import subprocess
import sys

import numpy as np
import pytest

from caffe_lstm import api
from caffe_lstm.cli import COMMANDS, cli
from tests.helpers import ROOT, sample

#: Imported by no numpy ``run``: module names, a name ending in "." stands for its submodules too.
NOT_FOR_RUN = (
    "caffe_lstm.serving", "caffe_lstm.verification", "caffe_lstm.layouts", "caffe_lstm.synthetic",
    "caffe_lstm.frontend.caffe_writer", "caffe_lstm.frontend.caffemodel_edit",
    "caffe_lstm.backends.unit_scale", "caffe_lstm.backends.onnx", "caffe_lstm.backends.tensorrt",
    "caffe_lstm.backends.dot", "caffe_lstm.compare", "caffe_lstm.bench", "caffe_lstm.built",
    "caffe_lstm.analysis.build_facts", "json",
    *(f"caffe_lstm.cli.{command}" for command in COMMANDS if command != "run"),
    "onnx", "onnxruntime", "tensorrt", "tensorrt_rtx", "polygraphy", "torch",
    "urllib.request", "http", "ssl", "email", "socket", "subprocess", "importlib.metadata",
)

#: Runs ``python -m caffe_lstm <argv>`` as the console script does, then prints (as a Python
#: literal: json would be an import) what ``import caffe_lstm`` imported, what was imported
#: after the command, and the garbage collections the command (its ``main``) ran.
PROBE = """
import gc, runpy, sys
import caffe_lstm
before = sorted(sys.modules)
import caffe_lstm.cli
collections = [generation["collections"] for generation in gc.get_stats()]
sys.argv = ["caffe-lstm", *sys.argv[1:]]
try:
    runpy.run_module("caffe_lstm", run_name="__main__", alter_sys=True)
except SystemExit as exc:
    status = exc.code or 0
else:
    status = 0
print(repr({"status": status, "before": before, "after": sorted(sys.modules),
            "collections": [generation["collections"] - done for generation, done
                            in zip(gc.get_stats(), collections)],
            "collecting": gc.isenabled(), "frozen": gc.get_freeze_count()}))
"""


def probe(*argv: object) -> dict:
    """What ``caffe-lstm <argv>`` imported and collected (``PROBE``)."""
    done = subprocess.run([sys.executable, "-c", PROBE, *map(str, argv)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert report["status"] == 0, done.stderr
    return report


def heavy(modules: list[str], unwanted: tuple[str, ...] = NOT_FOR_RUN) -> list[str]:
    return [name for name in modules
            if any(name == bad or name.startswith(bad + ".") for bad in unwanted)]


@pytest.fixture(scope="module")
def run_probe(tmp_path_factory) -> dict:
    net, weights = sample("seq_classifier")
    out = tmp_path_factory.mktemp("startup")
    inputs = out / "x.npz"
    np.savez(inputs, **api.load(net, weights).random_inputs(3))
    return probe("run", net, "-w", weights, "--inputs", inputs, "-o", out / "y.npz", "-q")


def test_run_with_numpy_imports_only_what_it_uses(run_probe):
    after = run_probe["after"]
    assert "caffe_lstm.backends.numpy_exec" in after  # it did run the net
    assert "caffe_lstm.cli.run" in after
    assert heavy(after) == []


def test_import_caffe_lstm_imports_no_name_until_used(run_probe):
    before = run_probe["before"]
    assert [name for name in before if name.startswith("caffe_lstm")] == ["caffe_lstm"]
    assert "numpy" not in before and "importlib.metadata" not in before


def test_the_check_sees_a_heavy_import():
    """Not vacuous: the same probe reports what another command imports (``serve --help``
    loads the serving stack)."""
    assert "caffe_lstm.serving.server" in heavy(probe("serve", "--help")["after"])


def test_the_collector_waits_while_the_command_is_imported(run_probe):
    """cli/startup.py: no collection walks the ~50,000 objects the imports make (about 70
    without the pause); the command resumes the collector, start-up's objects frozen."""
    assert run_probe["collections"][1:] == [0, 0], run_probe["collections"]
    assert run_probe["collections"][0] <= 5, run_probe["collections"]
    assert run_probe["collecting"]
    assert run_probe["frozen"] > 10_000


def test_every_command_is_named_and_registered_by_its_module():
    """The names ``caffe_lstm.cli`` defers are exactly the commands the modules register."""
    assert sorted(COMMANDS) == cli.list_commands(None)
    for name in COMMANDS:
        assert cli.commands[name].name == name


def test_a_mistyped_command_is_still_suggested(invoke):
    """click suggests from the group's names, known before any command module is imported."""
    result = invoke("rnu")
    assert result.exit_code == 2
    assert "No such command 'rnu'. Did you mean 'run'?" in result.stderr
