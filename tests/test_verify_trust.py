"""verify's verdicts a user can trust (issue 23): no verdict on an output without signal, the
first diverging layer named (--locate) for a planted wrong candidate in each column, every
column not checked listed with its reason, float16 tolerances under --fp16, and one rewrite per
verify.

The test net is of our own, like a public 3-D pose net: a deep CNN whose prototxt fillers are
`gaussian std: 0.01`, then an LSTM, with `weights init --fillers` (those fillers as written: the
signal shrinks to nothing) or `weights init` (each layer rescaled: the signal keeps unit order).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import caffe_lstm
from caffe_lstm.frontend.caffe_writer import write_caffemodel
from caffe_lstm.passes import manager
from tests.helpers import assert_one_error_line, run_cli, sample


CONVS = 6  # deep enough for std 0.01 to shrink the signal by some 1e-9


def _pose_like() -> str:
    layers = ['name: "pose_like"',
              'layer { name: "input" type: "Input" top: "frames" top: "cont"',
              '  input_param { shape { dim: 6 dim: 3 dim: 6 dim: 6 } shape { dim: 3 dim: 2 } } }']
    bottom = "frames"
    for k in range(1, CONVS + 1):
        layers += [f'layer {{ name: "conv{k}" type: "Convolution" bottom: "{bottom}"',
                   f'  top: "conv{k}"',
                   '  convolution_param { num_output: 4 kernel_size: 3 pad: 1',
                   '    weight_filler { type: "gaussian" std: 0.01 }',
                   '    bias_filler { type: "constant" value: 0 } } }',
                   f'layer {{ name: "relu{k}" type: "ReLU" bottom: "conv{k}" top: "conv{k}" }}']
        bottom = f"conv{k}"
    layers += [
        f'layer {{ name: "seq" type: "Reshape" bottom: "{bottom}" top: "seq"',
        '  reshape_param { shape { dim: 3 dim: 2 dim: -1 } } }',
        'layer { name: "lstm1" type: "LSTM" bottom: "seq" bottom: "cont" top: "lstm1"',
        '  recurrent_param { num_output: 5',
        '    weight_filler { type: "gaussian" std: 0.01 }',
        '    bias_filler { type: "constant" value: 0 } } }',
        'layer { name: "pose" type: "InnerProduct" bottom: "lstm1" top: "pose"',
        '  inner_product_param { num_output: 3 axis: 2',
        '    weight_filler { type: "gaussian" std: 0.01 }',
        '    bias_filler { type: "constant" value: 0 } } }']
    return "\n".join(layers) + "\n"


@pytest.fixture(scope="module")
def pose_like(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """The net with `weights init`'s weights (each layer's output at unit scale) and with
    `weights init --fillers` (the prototxt's N(0, 0.01²) as written: the signal vanishes)."""
    folder = tmp_path_factory.mktemp("pose_like")
    prototxt = folder / "pose_like.prototxt"
    prototxt.write_text(_pose_like())
    nets = {}
    for kind, flags in (("scaled", ()), ("fillers", ("--fillers",))):
        weights = folder / f"{kind}.caffemodel"
        made = run_cli("weights", "init", prototxt, "-o", weights, *flags)
        assert made.returncode == 0, made.stderr
        nets[kind] = (prototxt, weights)
    return nets


# ---- no verdict on no signal -------------------------------------------------------------------


def test_vanishing_outputs_are_no_signal_and_fail(pose_like):
    net, weights = pose_like["fillers"]
    proc = run_cli("verify", net, "-w", weights, "--no-onnxruntime")
    line = assert_one_error_line(proc, "have no signal, so nothing was checked there: pose")
    assert "`weights init`" in line and "--allow-no-signal" in line
    assert "pose: no signal: the reference is vanishingly small" in proc.stdout
    assert "`weights init --fillers`" in proc.stdout  # the cause, in the CLI's words
    table = [row for row in proc.stdout.splitlines() if row.startswith("pose ")]
    assert table and all(row.endswith("no signal") for row in table)
    allowed = run_cli("verify", net, "-w", weights, "--no-onnxruntime", "--allow-no-signal")
    assert allowed.returncode == 0, allowed.stderr
    assert "no signal" in allowed.stdout


def test_the_api_returns_the_same_status(pose_like):
    report = caffe_lstm.load(*pose_like["fillers"]).verify(tensorrt=False, onnxruntime=False)
    assert not report.ok and report.failures == []
    assert report.no_signal == ["pose (rewritten graph (numpy))"]
    assert caffe_lstm.load(*pose_like["fillers"]).verify(
        tensorrt=False, onnxruntime=False, allow_no_signal=True).ok
    scaled = caffe_lstm.load(*pose_like["scaled"]).verify(tensorrt=False, onnxruntime=False)
    assert scaled.ok and scaled.no_signal == [], scaled.results


def test_an_output_no_input_reaches_needs_only_to_be_finite_and_not_tiny(tmp_path):
    """A constant output (DummyData through a layer) has no input to ignore: it carries
    signal when it is finite and not vanishingly small, so verify passes on it."""
    prototxt = tmp_path / "const.prototxt"
    prototxt.write_text(
        'layer { name: "x" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }\n'
        'layer { name: "c" type: "DummyData" top: "c" dummy_data_param {\n'
        '  shape { dim: 2 dim: 3 } data_filler { type: "constant" value: 0.5 } } }\n'
        'layer { name: "k" type: "InnerProduct" bottom: "c" top: "k"\n'
        '  inner_product_param { num_output: 2 } }\n'
        'layer { name: "y" type: "InnerProduct" bottom: "x" top: "y"\n'
        '  inner_product_param { num_output: 2 } }\n')
    weights = tmp_path / "const.caffemodel"
    rng = np.random.default_rng(1)
    write_caffemodel(weights, [(name, "InnerProduct", [rng.normal(0, 1, (2, 3)).astype(
        np.float32), rng.normal(0, 1, (2,)).astype(np.float32)]) for name in ("k", "y")])
    report = caffe_lstm.load(prototxt, weights).verify(tensorrt=False, onnxruntime=False)
    assert report.ok, report.results
    assert all(row.verdict == "ok" for _, rows in report.results for row in rows)


# ---- --locate: a planted wrong candidate, found at its layer -----------------------------------

#: A plugin overriding a built-in type with one facet wrong for one node: the candidate that
#: facet builds is wrong there, and only there.
PLANT = '''
from caffe_lstm.ops import get_op, register_op

BASE = get_op("{op}")
_base = BASE.{facet}


@register_op(override=True)
class Planted(BASE):
    type = "{op}"

    @staticmethod
    def {facet}(ctx, node, *args):
        results = _base(ctx, node, *args)
        if node.name != "{node}":
            return results
        if "{facet}" == "numpy":
            return tuple(r * 1.5 for r in results)
        if "{facet}" == "onnx":
            return tuple(ctx.add("Add", [r, r], suffix="planted")[0] for r in results)
        doubled = [ctx.network.add_elementwise(r, r, ctx.trt.ElementWiseOperation.SUM)
                   for r in results]
        return tuple(layer.get_output(0) for layer in doubled)
'''

COLUMNS = {"numpy": ("rewritten graph (numpy)", "--no-trt", "--no-onnxruntime"),
           "tensorrt": ("TensorRT network, fp32 (CPU walk)", "--no-onnxruntime"),
           "onnx": ("ONNX model (onnxruntime)", "--no-trt")}


@pytest.mark.parametrize("facet, op, node, located", [
    # the numpy facets of Caffe's own layers are the reference's too: only a node the rewrite
    # inserted can make the numpy column wrong, and it has no reference of its own
    ("numpy", "Sigmoid", "__lstm1/o", "layer 'lstm1' (LSTM) at time step 0: lstm1"),
    ("tensorrt", "Convolution", "conv4", "layer 'conv4' (Convolution): conv4@conv4 max abs err"),
    ("tensorrt", "Sigmoid", "__lstm1/o",
     "layer 'lstm1' (LSTM), step node lstm1/o (Sigmoid) at time step 0: lstm1/o max abs err"),
    ("onnx", "Convolution", "conv4", "layer 'conv4' (Convolution): conv4@conv4 max abs err"),
    ("onnx", "Eltwise", "__lstm1/c",
     "layer 'lstm1' (LSTM), step node lstm1/c (Eltwise) at time step 0: lstm1/c max abs err"),
])
def test_a_planted_wrong_candidate_is_caught_and_located(pose_like, tmp_path, facet, op, node,
                                                        located):
    if facet == "tensorrt":
        pytest.importorskip("tensorrt_rtx_bindings", reason="the walk needs TensorRT for RTX")
    else:
        pytest.importorskip("onnxruntime", reason="the ONNX column needs onnxruntime")
    plugin = tmp_path / "planted.py"
    plugin.write_text(PLANT.format(op=op, facet=facet, node=node))
    net, weights = pose_like["scaled"]
    title, *only = COLUMNS[facet]
    proc = run_cli("verify", net, "-w", weights, "--plugin", plugin, *only)
    assert_one_error_line(proc, f"pose ({title})")
    assert f"original equations vs {title}" in proc.stdout
    found = [line for line in proc.stdout.splitlines() if line.startswith("first divergence")]
    assert len(found) == 1 and located in found[0], proc.stdout
    skipped = run_cli("verify", net, "-w", weights, "--plugin", plugin, *only, "--no-locate")
    assert skipped.returncode == 1 and "first divergence" not in skipped.stdout
    assert "rerun with --locate" in skipped.stderr


def test_the_api_names_the_located_layer(pose_like, monkeypatch):
    pytest.importorskip("onnxruntime", reason="the ONNX column needs onnxruntime")
    from caffe_lstm.ops import get_op

    softmax_free = get_op("InnerProduct")
    base = softmax_free.onnx

    def wrong(ctx, node, *args):
        results = base(ctx, node, *args)
        return tuple(ctx.add("Neg", [r])[0] for r in results) if node.name == "pose" \
            else results
    monkeypatch.setattr(softmax_free, "onnx", staticmethod(wrong))
    report = caffe_lstm.load(*pose_like["scaled"]).verify(tensorrt=False)
    column = next(c for c in report.columns if c.kind == "onnx")
    assert report.failures == ["pose (ONNX model (onnxruntime))"]
    assert (column.located.layer, column.located.layer_type, column.located.value,
            column.located.step) == ("pose", "InnerProduct", "pose", None)
    assert column.located.comparison.used > 1


@pytest.mark.parametrize("budget, found", [
    (None, "layer 'lstm1' (LSTM), step node lstm1/c (Eltwise) at time step 0: lstm1/c max abs"),
    (1000, "layer 'lstm1' (LSTM) at time step 0: lstm1 max abs err"),
])
def test_the_steps_are_searched_within_a_memory_budget(pose_like, invoke, monkeypatch, budget,
                                                      found):
    """Every step's body values of both traces are kept only within STEP_VALUE_BYTES (computed
    from the shapes before anything runs); beyond it the divergence is named by the recurrent
    layer's output and its first time step, and the line says why the steps were not searched
    and how large they would be."""
    pytest.importorskip("onnxruntime", reason="the ONNX column needs onnxruntime")
    from caffe_lstm.ops import get_op
    from caffe_lstm.verification import locate

    eltwise = get_op("Eltwise")
    base = eltwise.onnx

    def wrong(ctx, node, *args):
        results = base(ctx, node, *args)
        return tuple(ctx.add("Add", [r, r], suffix="planted")[0] for r in results) \
            if node.name == "__lstm1/c" else results
    monkeypatch.setattr(eltwise, "onnx", staticmethod(wrong))
    if budget is not None:
        monkeypatch.setattr(locate, "STEP_VALUE_BYTES", budget)
    net, weights = pose_like["scaled"]
    result = invoke("verify", net, "-w", weights, "--no-trt")
    assert result.exit_code == 1
    (line,) = [line for line in result.stdout.splitlines()
               if line.startswith("first divergence")]
    assert found in line, line
    assert ("only the recurrent layer's output is searched" in line) == (budget is not None)
    if budget is not None:
        assert "KiB (more than 1000 bytes; a shorter sequence searches the steps)" in line


# ---- say what was checked ----------------------------------------------------------------------


def _hide_module(monkeypatch, name: str) -> None:
    """As if ``name`` were not installed: importing it raises ImportError."""
    monkeypatch.setitem(sys.modules, name, None)


@pytest.mark.parametrize("how, column, reason", [
    ("no TensorRT", "TensorRT network, fp32 (CPU walk)", "no TensorRT runtime is installed"),
    ("--no-trt", "TensorRT network, fp32 (CPU walk)", "turned off (--no-trt)"),
    ("no onnxruntime", "ONNX model (onnxruntime)",
     "the onnxruntime Python module cannot be imported"),
    ("no ONNX form", "ONNX model (onnxruntime)", "cannot export these layers to ONNX: Softmax"),
    ("--no-onnxruntime", "ONNX model (onnxruntime)", "turned off (--no-onnxruntime)"),
    ("no engine", "engine (GPU)", "no engine given (--engine FILE)"),
    ("no GPU", "engine x.engine (GPU)", "no GPU here to run the engine"),
])
def test_every_column_not_checked_says_why(invoke, monkeypatch, tmp_path, how, column, reason):
    from caffe_lstm.backends.tensorrt.runtime import has_gpu
    from caffe_lstm.ops import get_op

    net, weights = sample("seq_classifier")
    flags: list[object] = []
    if how == "no TensorRT":
        _hide_module(monkeypatch, "tensorrt_rtx_bindings")
        _hide_module(monkeypatch, "tensorrt")
    elif how == "no onnxruntime":
        _hide_module(monkeypatch, "onnxruntime")
    elif how == "no ONNX form":
        monkeypatch.setattr(get_op("Softmax"), "onnx", None)
    elif how == "no GPU":
        if has_gpu():
            pytest.skip("this machine has a GPU: the engine would run")
        (tmp_path / "x.engine").write_bytes(b"never read without a GPU")
        flags = ["--engine", tmp_path / "x.engine"]
    elif how.startswith("--"):
        flags = [how]
    result = invoke("verify", net, "-w", weights, *flags)
    assert result.exit_code == 0, result.stderr
    assert f"{column} is not checked: {reason}" in result.stdout
    assert f"original equations vs {column}" not in result.stdout
    api_flags = {"--no-trt": {"tensorrt": False}, "--no-onnxruntime": {"onnxruntime": False},
                 "no GPU": {"engine": tmp_path / "x.engine"}}.get(how, {})
    report = caffe_lstm.load(net, weights).verify(**api_flags)
    api_reason = reason.replace("--no-trt", "tensorrt=False").replace(
        "--no-onnxruntime", "onnxruntime=False").replace("--engine FILE", "engine=PATH")
    assert api_reason in report.not_checked[column]
    assert column not in dict(report.results)


# ---- fp16 that verifies ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["captioner", "deepspeech_relu", "fork_recurrent",
                                  "fork_vision", "seq_classifier", "plugin_example"])
def test_fp16_passes_on_the_samples_with_float16_tolerances(name):
    pytest.importorskip("tensorrt_rtx_bindings", reason="the walk needs TensorRT for RTX")
    if name == "plugin_example":
        folder = Path(__file__).resolve().parents[1] / "samples" / name
        net, weights = folder / "normalize_lstm.prototxt", folder / "normalize_lstm.caffemodel"
        flags = ["--plugin", folder / "caffe_lstm_ssd_normalize" / "__init__.py"]
    else:
        (net, weights), flags = sample(name), []
    proc = run_cli("verify", net, "-w", weights, "--fp16", "--no-onnxruntime", *flags)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ("fp16: the TensorRT columns use float16 tolerances (atol 0.002·max|ref|, "
            "rtol 0.005); pass --atol, --rtol to choose others") in proc.stdout
    assert ("original equations vs TensorRT network, fp16 (CPU walk); match when "
            "|d| ≤ atol + rtol·|ref| with atol 0.002·max|ref|, rtol 0.005") in proc.stdout
    assert ("original equations vs rewritten graph (numpy); match when |d| ≤ atol + rtol·|ref| "
            "with atol 1e-05, rtol 0.0001") in proc.stdout


# ---- one preparation for all columns -----------------------------------------------------------


def test_verify_rewrites_the_net_once(monkeypatch, pose_like):
    pytest.importorskip("onnxruntime", reason="the ONNX column needs onnxruntime")
    calls = []
    expand = manager.PASSES["expand"]

    def counted(graph, *args):
        calls.append(graph.name)
        return expand(graph, *args)
    monkeypatch.setitem(manager.PASSES, "expand", counted)
    net = caffe_lstm.load(*pose_like["scaled"])
    report = net.verify()
    assert report.ok and len(report.results) >= 2, report.results
    assert len(calls) == 1
    # a mismatch searched with locate still works from that one preparation
    calls.clear()
    prepared = net.prepare()
    assert len(calls) == 1
    assert not net.verify(atol=0, rtol=0, prepared=prepared).ok
    assert len(calls) == 1


def test_an_fp16_engine_is_held_to_float16_tolerances(tmp_path):
    """An engine whose build facts (MODEL.engine.json) say fp16 gets float16 tolerances even
    without fp16=True: its column would otherwise fail on float16's rounding alone."""
    from caffe_lstm.analysis.build_facts import BuildFacts, file_sha256, write_sidecar
    from caffe_lstm.backends.tensorrt.runtime import has_gpu

    if has_gpu():
        pytest.skip("this machine has a GPU: the engine would run")
    net, weights = sample("seq_classifier")
    engine = tmp_path / "x.engine"
    engine.write_bytes(b"never read without a GPU")
    # facts naming these files (verify refuses an engine built from others)
    write_sidecar(tmp_path / "x.engine.json", BuildFacts(
        "zero", net.name, file_sha256(net), weights.name, file_sha256(weights), fp16=True))
    columns = {c.kind: c for c in caffe_lstm.load(net, weights).verify(
        engine=engine, tensorrt=False, onnxruntime=False).columns}
    assert columns["engine"].tolerance.describe() == "atol 0.002·max|ref|, rtol 0.005"
    assert columns["numpy"].tolerance.describe() == "atol 1e-05, rtol 0.0001"
