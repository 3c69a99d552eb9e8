"""docs/plugins.md's worked example runs as written: every ``$ caffe-lstm ...`` command of its
console blocks, from a copy of the samples, with the output the page shows (a line ending in
``...`` or ``[...]`` is matched up to there). ``pip install -e samples/plugin_example`` is done
as tests/test_plugins.py installs the package: a distribution with the entry points of its
pyproject.toml on the path."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest
from tests.helpers import ROOT, SAMPLES, install_example


DOC = ROOT / "docs" / "plugins.md"


def console_blocks(text: str) -> list[list[str]]:
    return [block.strip("\n").splitlines()
            for block in re.findall(r"```console\n(.*?)```", text, flags=re.S)]


def commands(block: list[str]) -> list[tuple[str, list[str]]]:
    """(command, the lines shown after it) for each ``$`` line of a block."""
    steps: list[tuple[str, list[str]]] = []
    for line in block:
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return steps


def shown_in(expected: str, lines: list[str]) -> bool:
    for marker in (" [...]", " ..."):
        if expected.endswith(marker):
            prefix = expected[: -len(marker)]
            return any(line.startswith(prefix) for line in lines)
    return expected in lines


def test_the_worked_example_runs_as_written(tmp_path):
    pytest.importorskip("tensorrt_rtx_bindings", reason="the example builds with TensorRT-RTX")
    pytest.importorskip("onnxruntime")
    for name in ("plugin_example", "python_layer", "conv_gru_plugin"):
        shutil.copytree(SAMPLES / name, tmp_path / "samples" / name)
    path = [str(ROOT)]
    ran = 0
    for block in console_blocks(DOC.read_text()):
        for command, shown in commands(block):
            if "NET.prototxt" in command:  # a template, not a command
                continue
            if command.startswith("pip install -e samples/plugin_example"):
                site = install_example(tmp_path / "site")
                path += [str(site), str(tmp_path / "samples" / "plugin_example")]
                continue
            args = shlex.split(command)
            assert args[0] == "caffe-lstm", command
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(
                filter(None, [*path, os.environ.get("PYTHONPATH", "")])))
            done = subprocess.run([sys.executable, "-m", "caffe_lstm", *args[1:]], cwd=tmp_path,
                                  env=env, capture_output=True, text=True, timeout=600)
            failing = any(line.startswith("error: ") for line in shown)
            assert done.returncode == (1 if failing else 0), (command, done.stderr)
            lines = (done.stderr if failing else done.stdout).splitlines()
            missing = [line for line in shown if not shown_in(line, lines)]
            assert missing == [], f"{command}\n{done.stdout}{done.stderr}"
            ran += 1
    assert ran >= 8, "the page lost its worked example"
    assert (tmp_path / "normalize_lstm.engine").stat().st_size > 0
    assert (tmp_path / "normalize_lstm.onnx").stat().st_size > 0
    assert (tmp_path / "conv_gru.engine").stat().st_size > 0
    assert (tmp_path / "models" / "conv_gru" / "config.pbtxt").is_file()


def test_the_python_example_runs(tmp_path, monkeypatch):
    shutil.copytree(SAMPLES / "plugin_example", tmp_path / "samples" / "plugin_example")
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    runnable = [block for block in blocks if block.startswith("import caffe_lstm")]
    assert runnable, "the page lost its Python example"
    from caffe_lstm.ops import plugins

    namespace: dict = {}
    with plugins.isolated():
        for block in runnable:
            exec(compile(block, str(DOC), "exec"), namespace)  # our own document
    assert set(namespace["outputs"]) == {"scores", "maps_norm"}
    for name in [n for n in sys.modules if n.startswith("caffe_lstm_plugin_")]:
        del sys.modules[name]
