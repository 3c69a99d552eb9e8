"""The ``onnx`` facets of the CNN-front-end and fork layers against their ``numpy`` facets.

Each case builds one IR node, calls its ``onnx`` facet through a minimal harness (an
OnnxContext, the node's bottoms as graph inputs and its blobs as initializers, opset 17 unless
said), checks the model with ``onnx.checker.check_model(full_check=True)``, runs it with
onnxruntime and compares with the numpy facet to 1e-5 relative. With ``symbolic`` the given
axes of every bottom are symbolic in the model and the run feeds other sizes than the IR's,
so a facet that baked T or N into a shape fails.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from caffe_lstm.errors import CaffeLstmError
from caffe_lstm.ir.graph import Value
from caffe_lstm.ops import get_op
from tests.helpers import conv_attrs, make_node, pool_attrs, rand

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from caffe_lstm.backends.onnx.context import OnnxContext  # noqa: E402

RNG = np.random.default_rng(12)


# ---- the harness ------------------------------------------------------------------------------


def export_node(op_type: str, attrs: dict, ir_shapes: Sequence[tuple[int, ...]],
                weights: Sequence[np.ndarray] = (), n_tops: int = 1, opset: int = 17,
                symbolic: Sequence[int] = ()):
    """The ONNX model of one node (bottoms ``ir_shapes``, blobs ``weights``) and the node.

    Axes in ``symbolic`` are named dims (``d0``, ``d1``...) in the model's inputs and outputs.
    """
    op = get_op(op_type)
    node = make_node(op_type, attrs, ir_shapes, n_tops)
    node.weights = [Value(f"{node.name}/w{i}", w.shape, w, True) for i, w in enumerate(weights)]
    out_shapes = op.infer(None, node, *ir_shapes)
    for value, shape in zip(node.outputs, out_shapes):
        value.shape = tuple(shape)
    ctx = OnnxContext(onnx, opset, lambda value: tuple(  # the bottoms' symbolic axes vary,
        f"d{a}" if a in symbolic and value in node.inputs else d  # as the exporter's do
        for a, d in enumerate(value.shape)))
    ctx.node = node
    for value in node.inputs + node.weights:
        ctx.reserve(value.name)
    ctx.parts.initializers += [ctx.initializer(v.name, v.data) for v in node.weights]
    names = op.onnx(ctx, node, *[v.name for v in node.inputs + node.weights])
    assert len(names) == n_tops

    def info(name: str, shape: Sequence[int]):
        dims = [f"d{a}" if a in symbolic else d for a, d in enumerate(shape)]
        return onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, dims)

    graph = onnx.helper.make_graph(
        ctx.parts.nodes, "one_node", [info(v.name, v.shape) for v in node.inputs],
        [info(name, shape) for name, shape in zip(names, out_shapes)], ctx.parts.initializers)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model, node


def run_onnx(model, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, inputs)))


def check(op_type: str, attrs: dict, inputs: Sequence[np.ndarray],
          weights: Sequence[np.ndarray] = (), *, n_tops: int = 1, opset: int = 17,
          symbolic: Sequence[int] = (), feed: Sequence[np.ndarray] | None = None):
    """Exports the node made for ``inputs`` and compares onnxruntime with the numpy facet on
    ``feed`` (default ``inputs``: other sizes along ``symbolic`` axes test dynamic dims)."""
    model, node = export_node(op_type, attrs, [x.shape for x in inputs], weights, n_tops,
                              opset, symbolic)
    feed = inputs if feed is None else feed
    got = run_onnx(model, feed)
    # the numpy facet on the fed arrays (their own shapes)
    fed = make_node(op_type, attrs, [x.shape for x in feed], n_tops)
    fed.weights = node.weights
    want = get_op(op_type).numpy(None, fed, *feed, *weights)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        scale = float(np.abs(w).max()) if w.size else 1.0
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * max(scale, 1e-30))
    return model


def op_types(model) -> list[str]:
    return [n.op_type for n in model.graph.node]


# ---- Convolution, Deconvolution, Im2col --------------------------------------------------------


@pytest.mark.parametrize("shape,changes,w_shape", [
    ((2, 3, 9, 8), {}, (4, 3, 3, 3)),
    ((2, 6, 13, 11), dict(num_output=9, group=3, kernel_size=[], kernel_h=3, kernel_w=2,
                          stride_h=2, stride_w=3, pad_h=2, pad_w=0, dilation=[2, 1]),
     (9, 2, 3, 2)),
    ((1, 3, 10, 8), dict(num_output=5, bias_term=False, kernel_size=[2, 4], stride=[1, 2],
                         pad=[1, 3], dilation=[3]), (5, 3, 2, 4)),
    ((2, 4, 15), dict(num_output=6, group=2, stride=[2], pad=[1]), (6, 2, 3)),
    ((2, 4, 5, 6, 7), dict(num_output=6, group=2, stride=[2], pad=[1]), (6, 2, 3, 3, 3)),
], ids=["plain", "group-dilation-per-axis", "no-bias-repeated", "1d", "3d"])
def test_convolution(shape, changes, w_shape):
    attrs = conv_attrs(**changes)
    bias = [rand(w_shape[0], rng=RNG)] if attrs["bias_term"] else []
    weights = [rand(*w_shape, rng=RNG)] + bias
    model = check("Convolution", attrs, [rand(*shape, rng=RNG)], weights)
    assert op_types(model) == ["Conv"]


def test_convolution_axis_2_keeps_leading_dims_symbolic():
    attrs = conv_attrs(num_output=5, axis=2, pad=[1])
    x, w, b = rand(3, 2, 4, 7, 7, rng=RNG), rand(5, 4, 3, 3, rng=RNG), rand(5, rng=RNG)
    check("Convolution", attrs, [x], [w, b], symbolic=(0, 1), feed=[rand(4, 3, 4, 7, 7, rng=RNG)])


def test_convolution_axis_0_convolves_one_item():
    attrs = conv_attrs(num_output=2, axis=0, pad=[1])
    check("Convolution", attrs, [rand(4, 6, 5, rng=RNG)],
          [rand(2, 4, 3, 3, rng=RNG), rand(2, rng=RNG)])


@pytest.mark.parametrize("shape,changes,w_shape", [
    ((2, 4, 5, 6), dict(num_output=6, group=2, kernel_size=[3, 2], stride=[2, 3], pad=[1, 0],
                        dilation=[2, 1]), (4, 3, 3, 2)),
    ((1, 4, 5, 5), dict(num_output=6, group=2, kernel_size=[4], stride=[2], pad=[1]),
     (4, 3, 4, 4)),
    ((2, 3, 7), dict(num_output=2, bias_term=False, stride=[3]), (3, 2, 3)),
], ids=["group-stride-dilation", "stride2-pad1", "1d-no-bias"])
def test_deconvolution(shape, changes, w_shape):
    attrs = conv_attrs(**changes)
    bias = [rand(attrs["num_output"], rng=RNG)] if attrs["bias_term"] else []
    weights = [rand(*w_shape, rng=RNG)] + bias
    model = check("Deconvolution", attrs, [rand(*shape, rng=RNG)], weights, symbolic=(0,),
                  feed=[rand(3, *shape[1:], rng=RNG)])
    assert op_types(model) == ["ConvTranspose"]


@pytest.mark.parametrize("changes", [
    dict(kernel_size=[3, 2], stride=[2, 1], pad=[1, 0], dilation=[1, 2]),
    dict(kernel_size=[2], pad=[1], stride=[2]),
])
def test_im2col(changes):
    check("Im2col", conv_attrs(**changes), [rand(2, 3, 7, 6, rng=RNG)])


def test_convolution_below_opset_13_is_refused():
    with pytest.raises(CaffeLstmError, match="opset 13 or newer"):
        export_node("Convolution", conv_attrs(num_output=2, axis=0), [(4, 6, 5)],
                    [rand(2, 4, 3, 3, rng=RNG), rand(2, rng=RNG)], opset=12)


# ---- Pooling ----------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["MAX", "AVE"])
@pytest.mark.parametrize("size,changes", [
    ((7, 7), dict(kernel_size=3, stride=2)),                     # ceil, no pad: exact fit
    ((8, 8), dict(kernel_size=3, stride=2)),                     # ceil overhang at the end
    ((6, 9), dict(kernel_size=3, stride=2, pad=1)),              # ceil with pad
    ((5, 5), dict(kernel_size=2, stride=2, pad=1)),              # clip rule drops a window
    ((7, 6), dict(kernel_h=3, kernel_w=2, stride_h=2, stride_w=3, pad_h=1, pad_w=1)),
    ((1, 7), dict(kernel_h=1, kernel_w=3, stride_h=1, stride_w=2, pad_h=0, pad_w=1)),
    ((9, 9), dict(kernel_size=3, stride=2, pad=1, round_mode="FLOOR")),
    ((10, 7), dict(kernel_size=3, stride=3, pad=2, round_mode="FLOOR")),
    ((5, 11), dict(kernel_size=1, stride=3)),                   # a window past the input
    ((6, 6), dict(kernel_size=2, stride=5)),                    # starts past, ceil
], ids=lambda v: str(v))
def test_pooling_borders(method, size, changes):
    attrs = pool_attrs(method, **changes)
    x = rand(2, 3, *size, rng=RNG)
    check("Pooling", attrs, [x], symbolic=(0,), feed=[rand(3, 3, *size, rng=RNG)])


@pytest.mark.parametrize("method", ["MAX", "AVE"])
def test_global_pooling(method):
    model = check("Pooling", pool_attrs(method, global_pooling=True), [rand(2, 3, 5, 4, rng=RNG)],
                  symbolic=(0,), feed=[rand(1, 3, 5, 4, rng=RNG)])
    assert op_types(model) == ["GlobalMaxPool" if method == "MAX" else "GlobalAveragePool"]


def test_ave_pooling_multiplies_by_the_divisor_map_only_where_needed():
    exact = check("Pooling", pool_attrs("AVE", kernel_size=2, stride=2),
                  [rand(1, 2, 6, 6, rng=RNG)])
    assert op_types(exact) == ["AveragePool"]
    borders = check("Pooling", pool_attrs("AVE", kernel_size=3, stride=2, pad=1),
                    [rand(1, 2, 6, 6, rng=RNG)])
    assert op_types(borders) == ["AveragePool", "Mul"]


# ---- LRN --------------------------------------------------------------------------------------


def lrn_attrs(region="ACROSS_CHANNELS", **changes) -> dict:
    attrs = {"local_size": 5, "alpha": 1e-4, "beta": 0.75, "k": 1.0, "norm_region": region}
    attrs.update(changes)
    return attrs


@pytest.mark.parametrize("changes", [
    dict(),
    dict(local_size=3, alpha=2.0, beta=0.6, k=2.0),
    dict(local_size=7, alpha=0.5, beta=1.3, k=0.5),
    dict(local_size=1, alpha=3.0),
], ids=["alexnet", "size3", "size-wider-than-half-C", "size1"])
def test_lrn_across_channels(changes):
    model = check("LRN", lrn_attrs(**changes), [rand(2, 6, 4, 5, rng=RNG) * 3], symbolic=(0,),
                  feed=[rand(3, 6, 4, 5, rng=RNG) * 3])
    assert op_types(model) == ["LRN"]


@pytest.mark.parametrize("changes", [dict(local_size=3, alpha=2.0), dict(k=5.0, beta=0.5)])
def test_lrn_within_channel_ignores_k(changes):
    check("LRN", lrn_attrs("WITHIN_CHANNEL", **changes), [rand(2, 3, 6, 7, rng=RNG) * 3],
          symbolic=(0,), feed=[rand(1, 3, 6, 7, rng=RNG) * 3])


# ---- BatchNorm, PReLU -------------------------------------------------------------------------


def stats(c: int, factor: float) -> list[np.ndarray]:
    """Stored blobs: factor·μ, factor·σ² (σ² > 0) and the factor."""
    return [rand(c, rng=RNG) * factor, (RNG.uniform(0.5, 1.5, c) * factor).astype(np.float32),
            np.array([factor], np.float32)]


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (4, 3), (2, 3, 4), (5,)])
@pytest.mark.parametrize("factor", [1.0, 7.5, 0.0])
def test_batch_norm_global_stats(shape, factor):
    attrs = {"use_global_stats": True, "eps": 1e-3}
    c = shape[1] if len(shape) > 1 else 1
    check("BatchNorm", attrs, [rand(*shape, rng=RNG)], stats(c, factor), symbolic=(0,),
          feed=[rand(3, *shape[1:], rng=RNG)])


@pytest.mark.parametrize("opset", [17, 18])
@pytest.mark.parametrize("shape", [(4, 3, 2, 5), (6, 2)])
def test_batch_norm_batch_stats(shape, opset):
    attrs = {"use_global_stats": False, "eps": 1e-5}
    check("BatchNorm", attrs, [rand(*shape, rng=RNG) * 2 + 1], stats(shape[1], 1.0), opset=opset,
          symbolic=(0,), feed=[rand(5, *shape[1:], rng=RNG) * 2 + 1])


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (4, 3), (2, 3, 6)])
def test_prelu(shape, shared):
    slope = rand(rng=RNG) if shared else rand(shape[1], rng=RNG)
    model = check("PReLU", {"channel_shared": shared}, [rand(*shape, rng=RNG)], [np.asarray(slope)],
                  symbolic=(0,), feed=[rand(3, *shape[1:], rng=RNG)])
    assert op_types(model)[-1] == "PRelu"


# ---- Permute, Transpose, Reverse, ContinuationIndicator ----------------------------------------


@pytest.mark.parametrize("order", [[3, 0], [0, 2, 1], [0, 1, 2, 3], [2]])
def test_permute(order):
    check("Permute", {"order": order}, [rand(2, 3, 4, 5, rng=RNG)], symbolic=(0,),
          feed=[rand(6, 3, 4, 5, rng=RNG)])


def test_transpose():
    check("Transpose", {"dim": [3, 2, 0, 1]}, [rand(2, 3, 4, 5, rng=RNG)], symbolic=(0, 1),
          feed=[rand(5, 1, 4, 5, rng=RNG)])


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_reverse_with_dynamic_t_and_n(axis):
    model = check("Reverse", {"axis": axis}, [rand(4, 3, 5, rng=RNG)], symbolic=(0, 1),
                  feed=[rand(7, 2, 5, rng=RNG)])
    assert op_types(model) == ["Slice"]


def test_reverse_of_one_step():
    check("Reverse", {"axis": 0}, [rand(1, 2, 3, rng=RNG)], symbolic=(0,),
          feed=[rand(1, 2, 3, rng=RNG)])


def test_pooling_and_im2col_refuse_symbolic_spatial_or_channel_dims():
    with pytest.raises(CaffeLstmError, match="H or W is not fixed"):
        export_node("Pooling", pool_attrs(kernel_size=2), [(1, 2, 4, 4)], symbolic=(3,))
    with pytest.raises(CaffeLstmError, match="channel axis is not fixed"):
        export_node("Im2col", conv_attrs(), [(1, 2, 4, 4)], symbolic=(1,))


def test_continuation_indicator_is_a_constant():
    model = check("ContinuationIndicator", {"time_step": 4, "batch_size": 3}, [])
    (cont,) = run_onnx(model, [])
    np.testing.assert_array_equal(cont, np.r_[np.zeros((1, 3)), np.ones((3, 3))])


# ---- every facet at the ends of the exporter's opset range -------------------------------------


@pytest.mark.parametrize("opset", [13, 21])
@pytest.mark.parametrize("op_type,attrs,shape,weights", [
    ("Convolution", conv_attrs(num_output=4, axis=2, pad=[1], stride=[2]), (2, 3, 6, 7, 5),
     [(4, 6, 3, 3), (4,)]),
    ("Deconvolution", conv_attrs(num_output=4, group=2, stride=[2]), (2, 6, 4, 5),
     [(6, 2, 3, 3), (4,)]),
    ("Im2col", conv_attrs(stride=[2]), (1, 2, 5, 6), []),
    ("Pooling", pool_attrs("AVE", kernel_size=3, stride=2, pad=1), (2, 3, 8, 7), []),
    ("Pooling", pool_attrs("MAX", kernel_size=1, stride=3), (2, 3, 5, 7), []),
    ("LRN", {"local_size": 3, "alpha": 1.0, "beta": 0.75, "k": 2.0,
             "norm_region": "WITHIN_CHANNEL"}, (2, 3, 5, 4), []),
    ("PReLU", {"channel_shared": False}, (2, 3, 4), [(3,)]),
    ("Reverse", {"axis": 0}, (5, 2, 3), []),
    ("Permute", {"order": [1, 0]}, (5, 2, 3), []),
], ids=lambda v: v if isinstance(v, str) else None)
def test_opset_range(op_type, attrs, shape, weights, opset):
    arrays = [rand(*s, rng=RNG) for s in weights]
    check(op_type, attrs, [rand(*shape, rng=RNG)], arrays, opset=opset, symbolic=(0,),
          feed=[rand(3, *shape[1:], rng=RNG)])


@pytest.mark.parametrize("opset", [13, 21])
@pytest.mark.parametrize("global_stats", [True, False])
def test_batch_norm_opset_range(opset, global_stats):
    attrs = {"use_global_stats": global_stats, "eps": 1e-5}
    check("BatchNorm", attrs, [rand(4, 3, 2, 2, rng=RNG)], stats(3, 2.0), opset=opset,
          symbolic=(0,), feed=[rand(2, 3, 2, 2, rng=RNG)])
