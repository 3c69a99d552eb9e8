"""The one home of what several test modules share (no test module imports another).

Sections: paths and the corpus; running the CLI; nets, weights and inputs; one op on its own;
TensorRT networks; ONNX export checks; the references (torch.nn.LSTM, the forks' forward
loops); the project's own metadata; the plugin example. Optional dependencies
(onnx, onnxruntime, tensorrt_rtx_bindings, torch) are imported where they are used, so every
test module can import this one whatever is installed.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import math
import os
import subprocess
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: build (a test dependency) brings tomli there
    import tomli as tomllib

from caffe_lstm.frontend.caffe_writer import write_caffemodel
from caffe_lstm.ir.graph import Node, Value
from caffe_lstm.ops import get_op

if TYPE_CHECKING:
    from caffe_lstm.backends.tensorrt.build import BuildOptions
    from caffe_lstm.ir.graph import Graph

# ---- paths and the corpus -----------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
CORPUS = ROOT.parent / "shared" / "corpus"
PYPROJECT = ROOT / "pyproject.toml"


def sample(name: str) -> tuple[Path, Path]:
    """(prototxt, caffemodel) of a sample net."""
    folder = SAMPLES / name
    return folder / f"{name}.prototxt", folder / f"{name}.caffemodel"


def corpus_files() -> list[Path]:
    """Every prototxt of ../shared/corpus, or none when it is absent (a user's clone)."""
    return sorted(CORPUS.rglob("*.prototxt")) if CORPUS.is_dir() else []


def needs_corpus() -> pytest.MarkDecorator:
    return pytest.mark.skipif(
        not CORPUS.is_dir(),
        reason="the corpus of public prototxts is not beside this clone (CI has it)")


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


#: file -> (--outputs cut or "", the expected outcome): "engine" = inspect, weights init, run
#: and convert succeed ("verified engine": weights init, verify and convert, for the train/test
#: nets); otherwise the text the one-line inspect error must contain.
CORPUS_EXPECTED = {
    "examples__LRCN_activity_recognition__deploy_lstm.prototxt": ("", "engine"),
    "examples__LRCN_activity_recognition__train_test_lstm_RGB.prototxt": ("", "verified engine"),
    "examples__LRCN_evaluate__deploy_lstm_lstm.prototxt": ("", "engine"),
    "examples__coco_caption__lrcn.prototxt": ("", "verified engine"),
    "examples__coco_caption__lrcn_word_to_preds.deploy.prototxt": ("", "engine"),
    "examples__coco_caption__lstm_language_model.prototxt": ("", "verified engine"),
    "examples__coco_caption__lstm_lm.deploy.prototxt": ("", "engine"),
    "examples__lstm_sequence__deep_lstm_short.prototxt": ("", "engine"),
    "examples__lstm_sequence__lstm_short.prototxt": ("", "engine"),
    "prototxt__scrc_word_to_preds_full.prototxt": ("", "engine"),
    "examples__ocr__densenet__densenet-res-blstm_deploy.prototxt": ("", "engine"),
    "examples__ocr__inception-bn__deploy.prototxt": ("", "engine"),
    "models__deploy.prototxt": ("rpn_cls_prob_reshape,rpn_bbox_pred", "engine"),
    "examples__language_fusion__deploy_lm_deepfus_img512_s2vt_glove.words_to_preds.prototxt":
        ("", "engine"),
    "examples__s2vt__s2vt.prototxt": ("", "verified engine"),
    "examples__s2vt__s2vt.words_to_preds.deploy.prototxt": ("", "engine"),
    "examples__warpctc_captcha__deploy.prototxt": ("", "engine"),
    "examples__crnn__deploy.prototxt": ("", "engine"),
}


#: Image sizes for the corpus nets whose CNN front dominates a test's time (CaffeNet over
#: 160 frames of 227×227, VGG16 at 600×900: about a minute of numpy, onnxruntime and the
#: parser's network each). Tests of the recurrent path and of the exports run them smaller with
#: --shape: the same layers, weight layouts and LSTMs, fc6 reading a smaller pool5.
#: test_corpus_pipeline and test_synthetic keep the prototxts' own sizes.
CORPUS_SMALL_SHAPES = {
    "examples__LRCN_activity_recognition__deploy_lstm.prototxt": {"data": (160, 3, 67, 67)},
    "models__deploy.prototxt": {"data": (1, 3, 96, 144)},
}


def small_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    return CORPUS_SMALL_SHAPES.get(path.name, {})


def shape_options(shapes: dict[str, tuple[int, ...]]) -> list[str]:
    """--shape NAME:DIMS per entry."""
    return [word for name, dims in shapes.items()
            for word in ("--shape", f"{name}:{'x'.join(map(str, dims))}")]


def corpus_deploy_nets() -> list[Path]:
    """The corpus files that are deploy nets (outcome "engine"; docs/corpus.md)."""
    return [path for path in corpus_files() if CORPUS_EXPECTED[path.name][1] == "engine"]


# ---- running the CLI ----------------------------------------------------------------------------


def run_cli(*args: object, timeout: float = 600, path: Sequence[Path] = ()
            ) -> subprocess.CompletedProcess[str]:
    """The real command in a subprocess (``python -m caffe_lstm``): exit status and stderr
    exactly as a user sees them, traceback or not. ``path``: folders put on PYTHONPATH (after
    the project, before what the tests inherited), for plugins installed there."""
    env = None
    if path:
        inherited = os.environ.get("PYTHONPATH", "")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            filter(None, [*map(str, (ROOT, *path)), inherited])))
    return subprocess.run([sys.executable, "-m", "caffe_lstm", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=env)


def assert_one_error_line(outcome: Any, needle: str = "") -> str:
    """The single ``error:`` line of a failed command, a finished subprocess (``run_cli``) or a
    click Result (the ``invoke`` fixture): exit 1, no traceback, ``needle`` in the line."""
    status = outcome.returncode if hasattr(outcome, "returncode") else outcome.exit_code
    lines = outcome.stderr.strip().splitlines()
    assert status == 1, outcome.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), outcome.stderr
    assert needle in lines[0], lines[0]
    assert "Traceback" not in outcome.stderr
    return lines[0]


def run_rewritten_and_original(invoke, tmp_path, net, weights, feeds):
    """Runs the rewritten graph (the default) and the direct equations (--original); checks
    they agree to 1e-5 and returns the rewritten graph's outputs."""
    inputs = tmp_path / "in.npz"
    np.savez(inputs, **feeds)
    runs = []
    for flags in ((), ("--original",)):
        out = tmp_path / f"out{len(runs)}.npz"
        result = invoke("run", net, "-w", weights, "--inputs", inputs, "-o", out, *flags)
        assert result.exit_code == 0, result.stderr
        with np.load(out) as data:
            runs.append({k: data[k] for k in data.files})
    rewritten, original = runs
    assert rewritten.keys() == original.keys()
    for name in rewritten:
        np.testing.assert_allclose(rewritten[name], original[name], atol=1e-5, rtol=0)
    return rewritten


# ---- nets, weights and inputs -------------------------------------------------------------------


def rand(*shape: int, rng: np.random.Generator | int = 0, scale: float = 1.0) -> np.ndarray:
    """Standard normal float32 values of ``shape``, times ``scale``, drawn from ``rng`` (a
    Generator, or the seed of a fresh one)."""
    generator = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    return (scale * generator.standard_normal(shape)).astype(np.float32)


def net_with_weights(tmp_path: Path, text: str, seed: int = 0):
    """The net of prototxt ``text`` with seeded synthetic weights, read back from a real
    caffemodel (written to ``tmp_path``); returns its graph."""
    from caffe_lstm.frontend.loader import load_net
    from caffe_lstm.synthetic import synthetic_weights

    prototxt, weights = tmp_path / "net.prototxt", tmp_path / "net.caffemodel"
    prototxt.write_text(text)
    write_caffemodel(weights, synthetic_weights(load_net(prototxt).graph, seed))
    loaded = load_net(prototxt, weights)
    assert loaded.missing_weights == []
    return loaded.graph


def synthetic_files(tmp_path: Path, text: str, seed: int = 0) -> tuple[Path, Path]:
    """``net_with_weights``'s files: (tmp_path/net.prototxt, tmp_path/net.caffemodel)."""
    net_with_weights(tmp_path, text, seed)
    return tmp_path / "net.prototxt", tmp_path / "net.caffemodel"


def _dims(shape) -> str:
    return " ".join(f"dim: {d}" for d in shape)


def input_layer(shapes: dict) -> str:
    """An Input layer with one top per name of ``shapes``, of that shape."""
    tops = " ".join(f'top: "{name}"' for name in shapes)
    dims = " ".join(f"shape {{ {_dims(s)} }}" for s in shapes.values())
    return f'layer {{ name: "input" type: "Input" {tops} input_param {{ {dims} }} }}\n'


def lstm_prototxt(T, N, in_dims, H, static=None, expose=False):
    """An Input layer and one LSTM layer; returns the prototxt text."""
    shapes = [(T, N) + tuple(in_dims), (T, N)]
    tops = ["x", "cont"]
    bottoms = ["x", "cont"]
    if static is not None:
        shapes.append((N, static))
        tops.append("x_static")
        bottoms.append("x_static")
    if expose:
        shapes += [(1, N, H), (1, N, H)]
        tops += ["h_0", "c_0"]
        bottoms += ["h_0", "c_0"]
    shape_text = " ".join("shape { " + " ".join(f"dim: {d}" for d in s) + " }" for s in shapes)
    top_text = " ".join(f'top: "{t}"' for t in tops)
    bottom_text = " ".join(f'bottom: "{b}"' for b in bottoms)
    out_tops = 'top: "h" top: "h_T" top: "c_T"' if expose else 'top: "h"'
    return (f'layer {{ name: "input" type: "Input" {top_text} input_param {{ {shape_text} }} }}\n'
            f'layer {{ name: "lstm1" type: "LSTM" {bottom_text} {out_tops}\n'
            f'  recurrent_param {{ num_output: {H} expose_hidden: {str(expose).lower()} }} }}\n')


#: The bidirectional LSTM of caffe_ocr and CTPN: Reverse(axis 0) → Lstm → Reverse(axis 0),
#: concatenated (axis 2) after the forward Lstm; (T, N, I, H) of its input and hidden width.
BLSTM_SIZES = (7, 3, 5, 4)
BLSTM_NET = """
name: "blstm"
input: "data"
input_shape {{ dim: {0} dim: {1} dim: {2} }}
layer {{ name: "lstm" type: "Lstm" bottom: "data" top: "lstm" lstm_param {{ num_output: {3} }} }}
layer {{ name: "lstm-reverse1" type: "Reverse" bottom: "data" top: "rlstm_input"
        reverse_param {{ axis: 0 }} }}
layer {{ name: "rlstm" type: "Lstm" bottom: "rlstm_input" top: "rlstm-output"
        lstm_param {{ num_output: {3} }} }}
layer {{ name: "lstm-reverse2" type: "Reverse" bottom: "rlstm-output" top: "rlstm"
        reverse_param {{ axis: 0 }} }}
layer {{ name: "merge" type: "Concat" bottom: "lstm" bottom: "rlstm" top: "merge"
        concat_param {{ axis: 2 }} }}
""".format(*BLSTM_SIZES)

#: Variant name -> the recurrent_param fields it sets (onnxruntime is the reference).
ONNX_VARIANTS = {
    "relu_candidate": {"candidate_activation": "RELU"},
    "clipped_relu_candidate": {"candidate_activation": "CLIPPED_RELU", "relu_clip": 0.75},
    "sigmoid_candidate": {"candidate_activation": "SIGMOID"},
    "identity_candidate": {"candidate_activation": "IDENTITY"},
    "sigmoid_cell": {"cell_activation": "SIGMOID"},
    "identity_cell": {"cell_activation": "IDENTITY"},
    "relu_cell": {"cell_activation": "RELU"},
    "clipped_relu_cell": {"cell_activation": "CLIPPED_RELU", "relu_clip": 0.5},
    "peephole": {"peephole": True},
    "deepspeech": {"candidate_activation": "RELU", "peephole": True},
    "clipped_relu_identity_peephole": {"candidate_activation": "CLIPPED_RELU", "relu_clip": 1.5,
                                       "cell_activation": "IDENTITY", "peephole": True},
    "clipped_relu_twice_peephole_projection": {
        "candidate_activation": "CLIPPED_RELU", "cell_activation": "CLIPPED_RELU",
        "relu_clip": 0.6, "peephole": True, "num_proj": 2},
    "relu_sigmoid_peephole_projection": {"candidate_activation": "RELU",
                                         "cell_activation": "SIGMOID", "peephole": True,
                                         "num_proj": 3},
}


def _prototxt_value(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _blob_list(key: str, names) -> str:
    return " ".join(f'{key}: "{name}"' for name in names)


def variant_net(T, N, I, H, variant, static=None, expose=False, layer_type="LSTM") -> str:
    """An Input layer and one recurrent layer ``lstm1`` with the variant's fields.

    Bottoms x, cont, [x_static], [r_0, c_0]; tops r [, r_T, c_T].
    """
    R = variant.get("num_proj") or H
    shapes = {"x": (T, N, I), "cont": (T, N)}
    if static is not None:
        shapes["x_static"] = (N, static)
    if expose:
        shapes.update(r_0=(1, N, R), c_0=(1, N, H))
    tops = ["r", "r_T", "c_T"] if expose else ["r"]
    dims = " ".join("shape { " + " ".join(f"dim: {d}" for d in s) + " }"
                    for s in shapes.values())
    fields = " ".join(f"{k}: {_prototxt_value(v)}" for k, v in variant.items())
    return (f'layer {{ name: "input" type: "Input" {_blob_list("top", shapes)} '
            f'input_param {{ {dims} }} }}\n'
            f'layer {{ name: "lstm1" type: "{layer_type}" {_blob_list("bottom", shapes)} '
            f'{_blob_list("top", tops)}\n'
            f'  recurrent_param {{ num_output: {H} expose_hidden: {str(expose).lower()} '
            f'{fields} }} }}\n')


def variant_blobs(rng, I, H, variant, S=None) -> dict[str, np.ndarray]:
    """Random blobs by name, in the spec's order: W_xc, b_c, [W_xc_static], W_hc, [P], [W_hr]."""
    P = variant.get("num_proj", 0)
    shapes = {"W_xc": (4 * H, I), "b_c": (4 * H,)}
    if S is not None:
        shapes["W_xc_static"] = (4 * H, S)
    shapes["W_hc"] = (4 * H, P or H)
    if variant.get("peephole"):
        shapes["P"] = (3, H)
    if P:
        shapes["W_hr"] = (P, H)
    return {name: rng.normal(0, 0.5, shape).astype(np.float32) for name, shape in shapes.items()}


def write_variant(tmp_path, text, blobs, layer_type="LSTM"):
    net, weights = tmp_path / "net.prototxt", tmp_path / "net.caffemodel"
    net.write_text(text)
    write_caffemodel(weights, [("lstm1", layer_type, list(blobs.values()))])
    return net, weights


#: The two set-ups every variant runs in: a plain sequence, and cont resets (one stream reset
#: mid-sequence, one non-binary value, the given state kept in one stream at t = 1) together
#: with a static input and expose_hidden.
SETUPS = {"plain": dict(static=None, expose=False), "everything": dict(static=4, expose=True)}


def feeds_for(rng, T, N, I, H, variant, setup) -> dict[str, np.ndarray]:
    R = variant.get("num_proj") or H
    feeds = {"x": rng.normal(size=(T, N, I)).astype(np.float32),
             "cont": np.ones((T, N), np.float32)}
    feeds["cont"][0] = 0
    if setup == "everything":
        feeds["cont"][0, 0] = 1.0  # stream 0 starts from the given r_0, c_0
        feeds["cont"][3, 1] = 0.0  # stream 1 starts a new sequence at t = 3
        feeds["cont"][2, 2 % N] = 0.5  # a non-binary cont scales the carried state
        feeds["x_static"] = rng.normal(size=(N, SETUPS[setup]["static"])).astype(np.float32)
        feeds["r_0"] = rng.normal(size=(1, N, R)).astype(np.float32)
        feeds["c_0"] = rng.normal(size=(1, N, H)).astype(np.float32)
    return feeds


#: Word-id inputs and their vocabulary sizes (``random_feeds`` gives the others uniform values).
VOCABULARY = {"ids": 7, "input_sentence": 50}


def random_feeds(graph: Graph, seed: int, shapes: dict | None = None) -> dict[str, np.ndarray]:
    """Inputs for ``graph`` (at ``shapes`` where given): word ids with fractional parts that
    Embed must truncate, cont with sequence starts, uniform values elsewhere."""
    rng, feeds = np.random.default_rng(seed), {}
    for value in graph.inputs:
        shape = (shapes or {}).get(value.name, value.shape)
        if value.name in VOCABULARY:
            ids = rng.integers(0, VOCABULARY[value.name], shape) + rng.uniform(0, 0.99, shape)
            ids.flat[0] = -0.5  # truncates to 0 (floor would give -1)
            feeds[value.name] = ids.astype(np.float32)
        elif value.name.startswith("cont"):
            cont = (rng.uniform(size=shape) > 0.3).astype(np.float32)
            cont[0] = 0  # every sequence starts at t = 0
            feeds[value.name] = cont
        else:
            feeds[value.name] = rng.uniform(-1, 1, shape).astype(np.float32)
    return feeds


# ---- one op on its own --------------------------------------------------------------------------


def make_node(op_type: str, attrs: dict[str, Any], shapes: Sequence[tuple[int, ...]],
              n_tops: int = 1, name: str = "layer") -> Node:
    """A node of ``op_type`` whose bottoms have ``shapes`` (outputs not yet shaped)."""
    inputs = [Value(f"bottom{i}", tuple(s)) for i, s in enumerate(shapes)]
    outputs = [Value(f"top{i}") for i in range(n_tops)]
    return Node(name, op_type, inputs, outputs, dict(attrs))


def run_op(op_type: str, attrs: dict[str, Any], inputs: Sequence[np.ndarray],
           weights: Sequence[np.ndarray] = (), n_tops: int = 1) -> tuple[np.ndarray, ...]:
    """Infers shapes and blob shapes, checks them against the arrays, and runs ``numpy``."""
    op = get_op(op_type)
    node = make_node(op_type, attrs, [np.shape(x) for x in inputs], n_tops)
    out_shapes = op.infer(None, node, *[v.shape for v in node.inputs])
    blob_shapes = [shape for _, shape in op.blobs(None, node, *[v.shape for v in node.inputs])]
    weight_shapes = [np.shape(w) for w in weights]
    assert blob_shapes == weight_shapes, (blob_shapes, weight_shapes)
    arrays = [np.asarray(a, np.float32) for a in [*inputs, *weights]]
    results = op.numpy(None, node, *arrays)
    assert [tuple(s) for s in out_shapes] == [np.shape(r) for r in results]
    return tuple(results)


def run_onnx_facet(op_type: str, attrs: dict[str, Any], inputs: Sequence[np.ndarray],
                   weights: Sequence[np.ndarray] = (), n_tops: int = 1, opset: int = 17,
                   dynamic: Sequence[tuple[int, int]] = ()) -> list[np.ndarray]:
    """The op's ``onnx`` facet as a one-node model, run by onnxruntime on float32 ``inputs``
    (no exporter needed).

    ``dynamic`` lists (bottom, axis) pairs that the model leaves symbolic, as an export with
    ``--shape`` ranges does: the facet must read them at run time.
    """
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from caffe_lstm.backends.onnx.context import OnnxContext

    op = get_op(op_type)
    node = make_node(op_type, attrs, [np.shape(x) for x in inputs], n_tops)
    node.weights = [Value(f"w{i}", np.shape(w), np.asarray(w, np.float32), is_weight=True)
                    for i, w in enumerate(weights)]
    for value, shape in zip(node.outputs, op.infer(None, node, *[v.shape for v in node.inputs])):
        value.shape = tuple(shape)
    varying = {(id(node.inputs[b]), axis) for b, axis in dynamic}

    def value_dims(value: Value) -> tuple:
        return tuple(None if (id(value), a) in varying else d for a, d in enumerate(value.shape))

    ctx = OnnxContext(onnx, opset, value_dims)
    ctx.node = node
    names = [v.name for v in node.inputs]
    for name in names:
        ctx.reserve(name)
    weight_names = [ctx.constant(np.asarray(w, np.float32), f"w{i}")
                    for i, w in enumerate(weights)]
    outputs = op.onnx(ctx, node, *names, *weight_names)

    def info(name: str, shape) -> Any:
        return onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, list(shape))

    graph = onnx.helper.make_graph(
        ctx.parts.nodes, "facet", [info(n, value_dims(v)) for n, v in zip(names, node.inputs)],
        [info(n, [None] * len(v.shape)) for n, v in zip(outputs, node.outputs)],
        ctx.parts.initializers)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {n: np.asarray(x, np.float32) for n, x in zip(names, inputs)}
    return session.run(list(outputs), feeds)


def conv_attrs(**changes) -> dict:
    """What parse makes of convolution_param, with ``changes``."""
    attrs = {"num_output": 4, "bias_term": True, "group": 1, "axis": 1, "kernel_size": [3],
             "stride": [], "pad": [], "dilation": [], "kernel_h": None, "kernel_w": None,
             "stride_h": None, "stride_w": None, "pad_h": None, "pad_w": None}
    attrs.update(changes)
    return attrs


def pool_attrs(pool="MAX", **changes) -> dict:
    """What parse makes of pooling_param, with ``changes``."""
    attrs = {"pool": pool, "global_pooling": False, "round_mode": "CEIL", "kernel_size": None,
             "kernel_h": None, "kernel_w": None, "stride": None, "stride_h": None,
             "stride_w": None, "pad": None, "pad_h": None, "pad_w": None}
    attrs.update(changes)
    return attrs


# ---- TensorRT networks --------------------------------------------------------------------------


@functools.cache
def _trt_logger():
    """TensorRT keeps one process-global logger: every builder here shares this one."""
    import tensorrt_rtx_bindings as trt

    return trt.Logger(trt.Logger.WARNING)


class TrtNet:
    """A strongly typed TensorRT network under construction, built directly with the
    TensorRT-RTX API; keeps the arrays given to Weights alive."""

    def __init__(self) -> None:
        import tensorrt_rtx_bindings as trt

        self.trt = trt
        self.builder = trt.Builder(_trt_logger())
        self.net = self.builder.create_network(0)
        self._keep: list[np.ndarray] = []

    def input(self, name: str, dtype, shape):
        return self.net.add_input(name, dtype, shape)

    def const(self, array):
        a = np.array(array, order="C", copy=True)     # not ascontiguousarray: keeps 0-D
        self._keep.append(a)
        return self.net.add_constant(a.shape, self.trt.Weights(a)).get_output(0)

    def output(self, tensor, name: str):
        tensor.name = name
        self.net.mark_output(tensor)

    def run(self, **feeds) -> dict[str, np.ndarray]:
        from caffe_lstm.backends.tensorrt.network_eval import evaluate_network

        return evaluate_network(self.trt, self.net, feeds)

    def builds(self) -> bool:
        config = self.builder.create_builder_config()
        return self.builder.build_serialized_network(self.net, config) is not None


RTX_MAGIC = b"vtrt"  # the first bytes of every TensorRT-RTX plan


def assert_plan(plan: bytes) -> None:
    """``plan`` is a serialized TensorRT-RTX engine."""
    assert isinstance(plan, bytes) and plan[:4] == RTX_MAGIC and len(plan) > 10_000


def assert_network_matches_numpy(runtime, graph: Graph, options: BuildOptions,
                                 feeds: dict[str, np.ndarray]) -> None:
    """The network our emitter makes of ``graph``, evaluated with numpy through TensorRT's
    API, equals the numpy executor (1e-5 in fp32, 1e-2 in fp16)."""
    from caffe_lstm.backends.numpy_exec import NumpyExecutor
    from caffe_lstm.backends.tensorrt.build import emit
    from caffe_lstm.backends.tensorrt.network_eval import evaluate_network

    _, network, _ = emit(runtime, graph, options)
    got = evaluate_network(runtime.trt, network, feeds)
    expected = NumpyExecutor(graph).run(feeds)
    assert sorted(got) == sorted(expected)
    tolerance = 1e-2 if options.fp16 else 1e-5
    for name, want in expected.items():
        np.testing.assert_allclose(got[name].astype(np.float32), want, rtol=tolerance,
                                   atol=tolerance, err_msg=name)


# ---- ONNX export checks -------------------------------------------------------------------------
# TensorRT's own OnnxParser builds the network of an exported model, our network evaluator
# (which ``verify`` uses on our emitter's networks) evaluates it, and the result is compared
# with onnxruntime's: the evaluator is then checked against two programs we did not write.

#: Exported outputs equal the reference to this fraction of its largest magnitude (fp32).
ONNX_RTOL = 1e-5
PARSER_RTOL = 1e-5
#: TensorRT for RTX's OnnxParser for the cross-check (installed by the test extra).
PARSER_AVAILABLE = importlib.util.find_spec("tensorrt_rtx_bindings") is not None


def run_outputs(invoke, tmp_path, net, weights, feeds, *flags) -> dict[str, np.ndarray]:
    """``caffe-lstm run`` on ``feeds`` (None: random inputs, seed 3); the outputs by name."""
    out = tmp_path / "out.npz"
    args = ["run", net, "-w", weights, "-o", out, *flags]
    if feeds is None:
        args += ["--seed", "3"]
    else:
        np.savez(tmp_path / "in.npz", **feeds)
        args += ["--inputs", tmp_path / "in.npz"]
    result = invoke(*args)
    assert result.exit_code == 0, result.stderr
    with np.load(out) as data:
        return {name: data[name] for name in data.files}


def export_model(invoke, tmp_path, net, weights, *flags):
    """``caffe-lstm export`` to tmp_path/model.onnx; the model passes the full check."""
    import onnx

    model = tmp_path / "model.onnx"
    result = invoke("export", net, "-w", weights, "-o", model, *flags)
    assert result.exit_code == 0, result.stderr
    onnx.checker.check_model(onnx.load(model), full_check=True)
    return model


def assert_close_to_scale(got: dict, expected: dict, rtol: float = ONNX_RTOL,
                          what: str = "max error") -> None:
    """Same names and shapes, and max |got − expected| ≤ rtol · max |expected| per output."""
    assert got.keys() == expected.keys()
    for name, reference in expected.items():
        assert got[name].shape == reference.shape, name
        scale = max(float(np.abs(reference).max(initial=0)), 1e-30)
        error = float(np.abs(got[name] - reference).max(initial=0))
        assert error <= rtol * scale, f"{name}: {what} {error:.3g} vs max |value| {scale:.3g}"


def check_export(invoke, tmp_path, net, weights, feeds_list, export_flags=(), state="zero",
                 outputs=""):
    """Exports once, then for every feeds: onnxruntime's outputs equal run --original's, and
    TensorRT's OnnxParser builds the model into a network whose evaluation equals onnxruntime's
    (``assert_parser_matches_onnxruntime``)."""
    common = ("--state", state, "--outputs", outputs)
    model = export_model(invoke, tmp_path, net, weights, *common, *export_flags)
    for feeds in feeds_list:
        expected = run_outputs(invoke, tmp_path, net, weights, feeds, "--original", *common)
        got = run_outputs(invoke, tmp_path, net, weights, feeds, "--backend", "onnxruntime",
                          "--onnx", model, *common)
        assert_close_to_scale(got, expected)
        if PARSER_AVAILABLE:
            actual = _actual_feeds(net, weights, feeds, state, outputs)
            assert_parser_matches_onnxruntime(model, actual)
    return model


def _actual_feeds(net, weights, feeds, state, outputs) -> dict[str, np.ndarray]:
    """The arrays ``run`` fed: ``feeds`` with zero initial states, or its seed-3 random ones."""
    import caffe_lstm

    names = [name for name in outputs.split(",") if name]
    loaded = caffe_lstm.load(net, weights, outputs=names)
    stated = loaded.with_state_io() if state == "io" else loaded
    if feeds is None:
        return stated.random_inputs(seed=3)
    zeros = {k: np.zeros_like(v) for k, v in stated.random_inputs(seed=3).items()
             if k.endswith(("/h_0", "/c_0")) and k not in feeds}
    return {**zeros, **feeds}


def parser_outputs(model: Path | bytes, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The parser-built network of ``model`` evaluated with numpy on ``feeds``."""
    from caffe_lstm.backends.tensorrt.network_eval import evaluate_network
    from caffe_lstm.backends.tensorrt.onnx_route import parse_onnx
    from caffe_lstm.backends.tensorrt.runtime import load_runtime

    runtime = load_runtime("tensorrt-rtx")
    data = model if isinstance(model, bytes) else _model_bytes(Path(model))
    _, network, parser = parse_onnx(runtime, data)
    names = [network.get_input(i).name for i in range(network.num_inputs)]
    results = evaluate_network(runtime.trt, network,
                               {name: feeds[_fed_name(name, feeds)] for name in names})
    del parser
    return {name: np.asarray(array, np.float32) for name, array in results.items()}


def onnxruntime_outputs(model: Path | bytes, feeds: dict[str, np.ndarray]) -> dict:
    import onnxruntime

    data = model if isinstance(model, bytes) else _model_bytes(Path(model))
    session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    wanted = {i.name for i in session.get_inputs()}
    outputs = session.run(None, {k: np.asarray(v, np.float32) for k, v in feeds.items()
                                 if k in wanted})
    return {o.name: array for o, array in zip(session.get_outputs(), outputs)}


def assert_parser_matches_onnxruntime(model: Path | bytes, feeds: dict[str, np.ndarray],
                                      onnxruntime_got: dict | None = None) -> None:
    """Every output of the parser-built network equals onnxruntime's (``onnxruntime_got`` when
    the caller has them already) to PARSER_RTOL of its largest magnitude."""
    if onnxruntime_got is None:
        onnxruntime_got = onnxruntime_outputs(model, feeds)
    assert_close_to_scale(parser_outputs(model, feeds), onnxruntime_got,
                          PARSER_RTOL, "parser network vs onnxruntime")


def _fed_name(name: str, feeds: dict) -> str:
    """The feed of a network input: TensorRT's parser renames a graph input that is also a graph
    output (a network input cannot be an output) to ``__<name>``."""
    if name not in feeds and name.startswith("__") and name[2:] in feeds:
        return name[2:]
    return name


def _model_bytes(path: Path) -> bytes:
    """The model's bytes, external data folded in (the parser reads one buffer)."""
    import onnx

    return onnx.load(str(path), load_external_data=True).SerializeToString()


# ---- torch.nn.LSTM, the independent reference for Caffe's LSTM -------------------------------
# Caffe's gate blocks are (i, f, o, g), torch's (i, f, g, o); Caffe has one bias, torch two (the
# second is zeroed). Everything in float64.

#: Caffe block k of the torch layout: torch (i, f, g, o) = Caffe blocks (0, 1, 3, 2).
TORCH_FROM_CAFFE = (0, 1, 3, 2)


def to_torch_gates(a: np.ndarray) -> np.ndarray:
    """A (4H, …) Caffe weight or bias with its gate blocks in torch's order, float64."""
    blocks = np.split(np.asarray(a, np.float64), 4, axis=0)
    return np.concatenate([blocks[k] for k in TORCH_FROM_CAFFE], axis=0)


def torch_lstm(x, w_xc, b_c, w_hc, h0=None, c0=None):
    """torch.nn.LSTM over x (T, N, I) from (h0, c0) of (N, H), zeros by default -> y (T, N, H),
    h_n (N, H), c_n (N, H)."""
    torch = pytest.importorskip("torch")
    steps, batch, inputs = np.shape(x)
    hidden = np.shape(w_hc)[1]
    zeros = np.zeros((batch, hidden))
    lstm = torch.nn.LSTM(inputs, hidden).double()
    with torch.no_grad():
        lstm.weight_ih_l0.copy_(torch.from_numpy(to_torch_gates(w_xc)))
        lstm.weight_hh_l0.copy_(torch.from_numpy(to_torch_gates(w_hc)))
        lstm.bias_ih_l0.copy_(torch.from_numpy(to_torch_gates(b_c)))
        lstm.bias_hh_l0.zero_()
        state = tuple(torch.from_numpy(np.asarray(s if s is not None else zeros, np.float64))[None]
                      for s in (h0, c0))
        y, (h_n, c_n) = lstm(torch.from_numpy(np.asarray(x, np.float64)), state)
    return y.numpy(), h_n[0].numpy(), c_n[0].numpy()


# ---- ports of forks' forward loops ------------------------------------------------------------
# Written from the forks' sources, the references the fork recurrent layers are checked against
# (float64, one loop per step and stream, as the C++ does).

def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def junhyukoh_lstm(x, clip, w_i, w_h, b, batch_size=1):
    """junhyukoh/caffe-lstm@4df18ac LstmLayer: Reshape (N = batch_size, T = num / N,
    I = count / num) then Forward_cpu with the per-stream pointers of its GPU code: rows
    t·N + n of x and of the clip; without a clip cont = (t > 0); the state starts at zero (the
    carry-over of a previous call is masked by clip_0 = 0). Returns the top (T·N, H)."""
    num = x.shape[0]
    steps, inputs = num // batch_size, x.size // num
    hidden = w_h.shape[1]
    rows = np.asarray(x, np.float64).reshape(num, inputs)
    pre_gate = rows @ np.asarray(w_i, np.float64).T + np.asarray(b, np.float64)
    clip = None if clip is None else np.asarray(clip, np.float64).reshape(num)
    h_prev, c_prev = np.zeros((batch_size, hidden)), np.zeros((batch_size, hidden))
    top = np.zeros((num, hidden))
    for t in range(steps):
        h_to_gate = h_prev @ np.asarray(w_h, np.float64).T
        h_next, c_next = np.zeros_like(h_prev), np.zeros_like(c_prev)
        for n in range(batch_size):
            row = t * batch_size + n
            cont = bool(clip[row]) if clip is not None else t > 0
            gate = pre_gate[row] + (h_to_gate[n] if cont else 0.0)
            i, f = _sigmoid(gate[:hidden]), _sigmoid(gate[hidden:2 * hidden]) if cont else 0.0
            o, g = _sigmoid(gate[2 * hidden:3 * hidden]), np.tanh(gate[3 * hidden:])
            c_next[n] = f * c_prev[n] + i * g      # c(t) = f(t)*c(t-1) + i(t)*g(t)
            h_next[n] = o * np.tanh(c_next[n])
            top[row] = h_next[n]
        h_prev, c_prev = h_next, c_next
    return top


def _apollo_tanh(x):
    """apollocaffe's tanh: (e^2x − 1) / (e^2x + 1) for |x| < 5, else ±1."""
    if abs(x) < 5:
        exp2x = np.exp(2 * x)
        return (exp2x - 1) / (exp2x + 1)
    return 1.0 if x > 0 else -1.0


def apollocaffe_lstm_unit(x, c_prev, w_input, w_input_gate, w_forget_gate, w_output_gate):
    """apollocaffe LstmUnitLayer::Forward_cpu: four gemms of x (N, K) with the (1, C, 1, K)
    blobs, then per element: i, f, o = sigmoid, value = tanh (the fork's), c = c_prev·f + i·v,
    h = tanh(c)·o. Returns h (N, C), c (N, C)."""
    num = x.shape[0]
    x = np.asarray(x, np.float64).reshape(num, -1)
    cells = np.shape(c_prev)[1]
    gemm = [x @ np.asarray(w, np.float64).reshape(cells, -1).T
            for w in (w_input, w_input_gate, w_forget_gate, w_output_gate)]
    h, c = np.zeros((num, cells)), np.zeros((num, cells))
    for n in range(num):
        for k in range(cells):
            value = _apollo_tanh(gemm[0][n, k])
            i, f, o = (_sigmoid(gemm[g][n, k]) for g in (1, 2, 3))
            c[n, k] = c_prev[n][k] * f + i * value
            h[n, k] = _apollo_tanh(c[n, k]) * o
    return h, c


def jolibrain_continuation_indicator(bottom_shape, time_step, axis):
    """jolibrain/caffe@23928c0 ContinuationIndicatorLayer: mini_batch_ = bottom shape(axis)
    (Blob::shape: a negative axis counts from the end), top (time_step, mini_batch_) written in
    order: 0 at t = 0, 1 after."""
    mini_batch = bottom_shape[axis]
    top = np.zeros(time_step * mini_batch, np.float32)
    index = 0
    for t in range(time_step):
        for _ in range(mini_batch):
            top[index] = 0.0 if t == 0 else 1.0
            index += 1
    return top.reshape(time_step, mini_batch)


def curve_text_convert(x):
    """Yuliang-Liu/Curve-Text-Detector@2126a66 ConvertLayer::Forward_cpu: sampleNum = shape(0),
    dimNum = shape(1), widthNum = the last axis; cont[tv·S + sv] = (tv > 0) and
    top[wv·S·D + sv·D + dv] = bottom[sv·D·W + dv·W + wv]. Returns top (W, S, D), cont (W, S)."""
    samples, dims, width = x.shape[0], x.shape[1], x.shape[-1]
    bottom = np.asarray(x, np.float32).reshape(-1)
    top = np.zeros(width * samples * dims, np.float32)
    cont = np.zeros(width * samples, np.float32)
    for tv in range(width):
        for sv in range(samples):
            cont[tv * samples + sv] = 0 if tv == 0 else 1
    for sv in range(samples):
        for dv in range(dims):
            for wv in range(width):
                top[wv * samples * dims + sv * dims + dv] = \
                    bottom[sv * dims * width + dv * width + wv]
    return top.reshape(width, samples, dims), cont.reshape(width, samples)


def fast_rcnn_roi_pooling(x, rois, pooled_h, pooled_w, spatial_scale):
    """rbgirshick/caffe-fast-rcnn@4c85442 ROIPoolingLayer::Forward_cpu, scalar loops as there:
    top starts at -FLT_MAX; per roi int(rois[0]) and round(x1..y2 · spatial_scale) (C's round of
    the float product: halves away from zero), roi size max(end − start + 1, 1), bin size
    float(size) / pooled; per bin [floor(p·bin), ceil((p + 1)·bin)) + start clipped to the map;
    an empty bin is 0; a pixel replaces the bin's value when it is greater."""
    def c_round(v):
        magnitude = abs(float(v))
        whole = math.floor(magnitude)
        rounded = whole + 1 if magnitude - whole >= 0.5 else whole
        return int(math.copysign(rounded, float(v)))

    scale = np.float32(spatial_scale)
    _, channels, height, width = x.shape
    top = np.full((len(rois), channels, pooled_h, pooled_w), -np.finfo(np.float32).max,
                  np.float32)
    for n, roi in enumerate(np.asarray(rois, np.float32).reshape(-1, 5)):
        batch = int(roi[0])
        start_w, start_h, end_w, end_h = (c_round(roi[k] * scale) for k in (1, 2, 3, 4))
        bin_h = np.float32(max(end_h - start_h + 1, 1)) / np.float32(pooled_h)
        bin_w = np.float32(max(end_w - start_w + 1, 1)) / np.float32(pooled_w)
        for c in range(channels):
            for ph in range(pooled_h):
                for pw in range(pooled_w):
                    hstart = math.floor(np.float32(ph) * bin_h)
                    wstart = math.floor(np.float32(pw) * bin_w)
                    hend = math.ceil(np.float32(ph + 1) * bin_h)
                    wend = math.ceil(np.float32(pw + 1) * bin_w)
                    hstart = min(max(hstart + start_h, 0), height)
                    hend = min(max(hend + start_h, 0), height)
                    wstart = min(max(wstart + start_w, 0), width)
                    wend = min(max(wend + start_w, 0), width)
                    if hend <= hstart or wend <= wstart:
                        top[n, c, ph, pw] = 0
                    for h in range(hstart, hend):
                        for w in range(wstart, wend):
                            if x[batch, c, h, w] > top[n, c, ph, pw]:
                                top[n, c, ph, pw] = x[batch, c, h, w]
    return top


def charleen_transpose(x, transposetype, batch_size=1, local_connected_num=8, height=77):
    """Charleen777/caffecode@bd3648c (dev) TransposeLayer: Reshape and Forward_cpu of the modes
    LSTMINPUT, LSTMOUTPUT and GRIDLSTM, scalar loops over the flat buffers as there."""
    bottom = np.asarray(x, np.float32).reshape(-1)
    shape = tuple(x.shape) + (1,) * (4 - x.ndim)
    if transposetype == "LSTMINPUT":
        num, channels, spatial = shape[0], shape[1], shape[2] * shape[3]
        top = np.zeros(bottom.size, np.float32)
        for n in range(num):
            offset = bottom.size // num * n
            for c in range(channels):
                for i in range(spatial):
                    top[offset + i * channels + c] = bottom[offset + c * spatial + i]
        return top.reshape(num * spatial, channels)
    if transposetype == "LSTMOUTPUT":
        top_shape = (batch_size, x.shape[1], height, x.shape[0] // batch_size // height)
        spatial, channels = top_shape[2] * top_shape[3], top_shape[1]
        top = np.zeros(bottom.size, np.float32)
        for n in range(top_shape[0]):
            offset = bottom.size // top_shape[0] * n
            for c in range(channels):
                for i in range(spatial):
                    top[offset + c * spatial + i] = bottom[offset + i * channels + c]
        return top.reshape(top_shape)
    assert transposetype == "GRIDLSTM" and local_connected_num == 8
    spatial, channels = x.shape[0] // batch_size, x.shape[1]
    each_channel = channels // local_connected_num
    trans_offset = [-height - 1, -height, -height + 1, -1, 1, height - 1, height, height + 1]
    top = np.zeros(bottom.size, np.float32)
    for n in range(batch_size):
        offset = bottom.size // batch_size * n
        for i in range(spatial):
            for ln in range(local_connected_num):
                trans_index = i + trans_offset[ln]
                if 0 < trans_index < spatial:
                    for c in range(each_channel):
                        top[offset + i * channels + ln * each_channel + c] = bottom[
                            offset + trans_index * channels
                            + (local_connected_num - ln - 1) * each_channel + c]
    return top.reshape(x.shape)


def deepdiary_caption_input(img, sent, w_e, b_e, w_s, sequence_len):
    """fanchenyou/deepdiary@dba4d93 CaptionInputLayer::Forward_cpu on a fresh (zeroed) top:
    X[0] = img·Weᵀ + be (two gemms), then X[t, n] = Ws[int(sent[n, t − 1])] where the id is
    ≥ 0. Returns the top (T·N, H)."""
    num, steps = img.shape[0], sequence_len + 1
    hidden = w_e.shape[0]
    x = np.zeros((steps, num, hidden), np.float32)
    image = np.asarray(img, np.float64).reshape(num, -1)
    for n in range(num):
        x[0, n] = image[n] @ np.asarray(w_e, np.float64).T + b_e
    words = np.asarray(sent, np.float32).reshape(num, steps - 1)
    for t in range(1, steps):
        for n in range(num):
            word_id = int(words[n, t - 1])  # C's conversion: toward zero
            if word_id >= 0:
                x[t, n] = w_s[word_id]
    return x.reshape(steps * num, hidden)


# ---- the project's own metadata and tools -------------------------------------------------------


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


# ---- the plugin example ------------------------------------------------------------------------

#: The installable plugin package of docs/plugins.md.
PLUGIN_EXAMPLE = SAMPLES / "plugin_example"


@contextlib.contextmanager
def isolated_plugin_modules(*prefixes: str):
    """The built-in registry inside; the modules that plugins loaded inside imported (named
    ``caffe_lstm_plugin_*`` or starting with one of ``prefixes``) are forgotten afterwards."""
    from caffe_lstm.ops import plugins

    modules = set(sys.modules)
    with plugins.isolated():
        yield
    for name in set(sys.modules) - modules:
        if name.startswith(("caffe_lstm_plugin_", *prefixes)):
            del sys.modules[name]


def install_example(site: Path, example: Path = PLUGIN_EXAMPLE) -> Path:
    """A distribution of the example package in ``site`` (to put on the path): its METADATA and
    the entry points its pyproject.toml declares, in pip's entry_points.txt format."""
    project = tomllib.loads((example / "pyproject.toml").read_text())["project"]
    info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    lines = []
    for group, entries in project["entry-points"].items():
        lines.append(f"[{group}]")
        lines += [f"{name} = {value}" for name, value in entries.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return site
