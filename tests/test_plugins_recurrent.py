"""A recurrent layer type as a plugin: ``RecurrentSpec`` + ``expand`` (docs/plugins.md).

The plugin below is a two-level LSTM in one layer (``recurrent_param.num_output`` H for both
levels; blobs W_xc, b_c, W_hc of level 1 then of level 2), written on top of caffe-lstm's own
LSTM: its ``numpy`` runs the built-in LSTM's equations twice, its ``expand`` writes two LSTM
layers, which the rewrite expands in turn. Checked against torch.nn.LSTM(num_layers=2); it runs,
verifies (equations, rewrite, TensorRT network, onnxruntime), converts and exports, and
``--state io`` exposes its declared states.
"""

from __future__ import annotations

import numpy as np
import pytest

import caffe_lstm
from caffe_lstm.frontend.caffe_writer import write_caffemodel
from caffe_lstm.ops import plugins
from caffe_lstm.synthetic import synthetic_weights
from tests.helpers import run_cli, to_torch_gates

PLUGIN = '''
from caffe_lstm.ir.graph import Node, Value
from caffe_lstm.ops import Op, RecurrentSpec, get_op, register_op


@register_op
class LSTM2(Op):
    """Two LSTM levels in one layer: h1 = LSTM(x, cont), h = LSTM(h1, cont), both of
    num_output H (recurrent_param); blobs W_xc, b_c, W_hc of level 1 then of level 2."""

    type = "LSTM2"
    param = "recurrent_param"
    origin = "a test of caffe-lstm's plugin API"
    limits = "no expose_hidden, no x_static"
    n_bottoms = (2, 2)
    recurrent = RecurrentSpec(states=("h", "c"), static_bottom=None, exposable=False)
    tensorrt_missing_reason = onnx_missing_reason = "expanded into LSTM layers by the rewrite"

    @staticmethod
    def parse(ctx, p):
        return get_op("LSTM").parse(ctx, p)

    @staticmethod
    def infer(ctx, node, x, cont):
        (h1,) = get_op("LSTM").infer(ctx, _level(node, 1), x, cont)
        return get_op("LSTM").infer(ctx, _level(node, 2), h1, cont)

    @staticmethod
    def blobs(ctx, node, x, cont):
        lstm = get_op("LSTM")
        (h1,) = lstm.infer(ctx, _level(node, 1), x, cont)
        return tuple((f"{name}_{level}", shape) for level, shapes in
                     ((1, lstm.blobs(ctx, _level(node, 1), x, cont)),
                      (2, lstm.blobs(ctx, _level(node, 2), h1, cont)))
                     for name, shape in shapes)

    @staticmethod
    def numpy(ctx, node, x, cont, *blobs):
        lstm = get_op("LSTM")
        (h1,) = lstm.numpy(ctx, _level(node, 1), x, cont, *blobs[:3])
        return lstm.numpy(ctx, _level(node, 2), h1, cont, *blobs[3:])

    @staticmethod
    def expand(b, node):
        x, cont = node.inputs
        (h1,) = b.add("LSTM", "level1", [x, cont], node.attrs, node.weights[:3], tops=["h1"])
        b.add("LSTM", "level2", [h1, cont], node.attrs, node.weights[3:],
              outputs=node.outputs)


def _level(node, level):
    """The node of one level, as the built-in LSTM's facets read it."""
    return Node(f"{node.name}/level{level}", "LSTM", [Value("x"), Value("cont")],
                [Value("h")], node.attrs, node.weights[3 * (level - 1):3 * level])
'''

NET = '''
layer { name: "in" type: "Input" top: "x" top: "cont"
        input_param { shape { dim: 5 dim: 2 dim: 3 } shape { dim: 5 dim: 2 } } }
layer { name: "stack" type: "LSTM2" bottom: "x" bottom: "cont" top: "h"
        recurrent_param { num_output: 4 } }
'''


@pytest.fixture
def files(tmp_path):
    plugin, net, weights = tmp_path / "lstm2.py", tmp_path / "net.prototxt", \
        tmp_path / "net.caffemodel"
    plugin.write_text(PLUGIN)
    net.write_text(NET)
    with plugins.isolated():
        graph = caffe_lstm.load(net, plugins=[plugin]).graph
        write_caffemodel(weights, synthetic_weights(graph, 7))
    return plugin, net, weights


def torch_stack(x, blobs):
    """torch.nn.LSTM(num_layers=2) with Caffe's blobs of both levels (cont 0 only at t = 0)."""
    torch = pytest.importorskip("torch")
    lstm = torch.nn.LSTM(3, 4, num_layers=2).double()
    with torch.no_grad():
        for level in range(2):
            w_xc, b_c, w_hc = blobs[3 * level:3 * level + 3]
            getattr(lstm, f"weight_ih_l{level}").copy_(torch.from_numpy(to_torch_gates(w_xc)))
            getattr(lstm, f"weight_hh_l{level}").copy_(torch.from_numpy(to_torch_gates(w_hc)))
            getattr(lstm, f"bias_ih_l{level}").copy_(torch.from_numpy(to_torch_gates(b_c)))
            getattr(lstm, f"bias_hh_l{level}").zero_()
        y, _ = lstm(torch.from_numpy(np.asarray(x, np.float64)))
    return y.numpy()


def test_a_recurrent_plugin_equals_torch_as_written_and_rewritten(files):
    plugin, net, weights = files
    with plugins.isolated():
        loaded = caffe_lstm.load(net, weights, plugins=[plugin])
        assert loaded.recurrent_layers == ["stack"]
        rng = np.random.default_rng(0)
        cont = np.ones((5, 2), np.float32)
        cont[0] = 0
        feeds = {"x": rng.standard_normal((5, 2, 3)).astype(np.float32), "cont": cont}
        want = torch_stack(feeds["x"], [v.data for v in loaded.graph.node("stack").weights])
        for original in (True, False):
            got = loaded.run(feeds, original=original)["h"]
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        rewritten = loaded.rewritten().graph
        assert {n.op for n in rewritten.nodes} >= {"Loop"} and "LSTM" not in \
            {n.op for n in rewritten.nodes} and "LSTM2" not in {n.op for n in rewritten.nodes}


def test_a_recurrent_plugin_verifies_converts_and_exports(files, tmp_path):
    pytest.importorskip("tensorrt_rtx_bindings")
    pytest.importorskip("onnxruntime")
    plugin, net, weights = files
    done = run_cli("verify", net, "-w", weights, "--plugin", plugin, "--runtime", "tensorrt-rtx",
                   "--onnxruntime")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(" ok") == 3 and "TensorRT" in done.stdout, done.stdout
    engine, model = tmp_path / "net.engine", tmp_path / "net.onnx"
    for command, target in (("convert", engine), ("export", model)):
        extra = ("--runtime", "tensorrt-rtx") if command == "convert" else ()
        done = run_cli(command, net, "-w", weights, "--plugin", plugin, "-o", target, *extra)
        assert done.returncode == 0 and target.stat().st_size > 0, done.stderr


def test_an_expansion_that_never_ends_is_the_plugin_s_error(tmp_path):
    plugin, net = tmp_path / "loop.py", tmp_path / "net.prototxt"
    plugin.write_text(PLUGIN.replace('b.add("LSTM", "level1"', 'b.add("LSTM2", "level1"')
                      .replace('node.weights[:3], tops=["h1"])', 'node.weights, tops=["h1"])'))
    net.write_text(NET)
    done = run_cli("dot", net, "--plugin", plugin, "-o", tmp_path / "net.dot")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"the plugin '{plugin}' (file) nests more than 8 levels" in done.stderr
    assert not (tmp_path / "net.dot").exists()

