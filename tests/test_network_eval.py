"""The numpy evaluator of real TensorRT networks, against numpy, hand literals and torch.

Every network is built here directly with the TensorRT-RTX Python API; the expected values are
written independently of the evaluator (numpy expressions, literals, torch.nn.LSTM).
"""

from __future__ import annotations

import numpy as np
import pytest

trt = pytest.importorskip(
    "tensorrt_rtx_bindings",
    reason="TensorRT-RTX Python bindings (tensorrt_rtx_bindings) are not installed")

from caffe_lstm.backends.tensorrt.network_eval import (  # noqa: E402
    NetworkEvalError,
)
from tests.helpers import TrtNet, torch_lstm  # noqa: E402

E, A, M = trt.ElementWiseOperation, trt.ActivationType, trt.MatrixOperation
RNG = np.random.default_rng(7)


def test_matmul_with_transpose_and_bias():
    n = TrtNet()
    x = n.input("x", trt.float32, (2, 3, 4))
    w = RNG.standard_normal((5, 4)).astype(np.float32)
    b = RNG.standard_normal(5).astype(np.float32)
    xw = n.net.add_matrix_multiply(x, M.NONE, n.const(w[None]), M.TRANSPOSE).get_output(0)
    n.output(n.net.add_elementwise(xw, n.const(b.reshape(1, 1, 5)), E.SUM).get_output(0), "y")
    x_value = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    y = n.run(x=x_value)["y"]
    assert y.dtype == np.float32 and y.shape == (2, 3, 5)
    np.testing.assert_allclose(y, x_value @ w.T + b, rtol=1e-6, atol=1e-6)


def test_matmul_vector_operands():
    n = TrtNet()
    v = n.input("v", trt.float32, (3,))
    m = n.const(np.arange(6, dtype=np.float32).reshape(3, 2))    # [[0,1],[2,3],[4,5]]
    n.output(n.net.add_matrix_multiply(v, M.VECTOR, m, M.NONE).get_output(0), "vm")
    n.output(n.net.add_matrix_multiply(m, M.TRANSPOSE, v, M.VECTOR).get_output(0), "mv")
    out = n.run(v=np.array([1, 2, 3], np.float32))
    np.testing.assert_array_equal(out["vm"], [16, 22])           # 0+4+12, 1+6+15
    np.testing.assert_array_equal(out["mv"], [16, 22])


def test_shuffle_transposes_and_placeholder_reshape():
    n = TrtNet()
    x = n.input("x", trt.float32, (2, 3, 4))
    s = n.net.add_shuffle(x)
    s.first_transpose = (2, 0, 1)          # (4, 2, 3)
    s.reshape_dims = (0, -1)               # (4, 6): 0 copies the 4
    s.second_transpose = (1, 0)            # (6, 4)
    n.output(s.get_output(0), "y")
    x_value = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    y = n.run(x=x_value)["y"]
    np.testing.assert_array_equal(y, np.transpose(x_value, (2, 0, 1)).reshape(4, 6).T)
    # y[m, k] = x[i, j, k] with m = 3i + j
    assert y[1].tolist() == [4, 5, 6, 7] and y[3].tolist() == [12, 13, 14, 15]


def test_shuffle_dynamic_reshape_from_a_shape_tensor():
    n = TrtNet()
    x = n.input("x", trt.float32, (2, 6))
    like = n.input("like", trt.float32, (3, 4))
    s = n.net.add_shuffle(x)
    s.set_input(1, n.net.add_shape(like).get_output(0))
    n.output(s.get_output(0), "y")
    x_value = np.arange(12, dtype=np.float32).reshape(2, 6)
    y = n.run(x=x_value, like=np.zeros((3, 4), np.float32))["y"]
    assert y.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]


def test_strided_slice_and_clamp_wrap_fill_modes():
    n = TrtNet()
    x = n.input("x", trt.float32, (2, 3))
    n.output(n.net.add_slice(x, (0, 0), (2, 2), (1, 2)).get_output(0), "strided")
    n.output(n.net.add_slice(x, (1, 2), (2, 3), (-1, -1)).get_output(0), "backwards")
    for mode in ("CLAMP", "WRAP", "FILL"):
        s = n.net.add_slice(x, (0, -1), (2, 5), (1, 1))
        s.mode = getattr(trt.SampleMode, mode)
        n.output(s.get_output(0), mode)
    out = n.run(x=np.array([[1, 2, 3], [4, 5, 6]], np.float32))
    assert out["strided"].tolist() == [[1, 3], [4, 6]]
    assert out["backwards"].tolist() == [[6, 5, 4], [3, 2, 1]]
    assert out["CLAMP"].tolist() == [[1, 1, 2, 3, 3], [4, 4, 5, 6, 6]]
    assert out["WRAP"].tolist() == [[3, 1, 2, 3, 1], [6, 4, 5, 6, 4]]
    assert out["FILL"].tolist() == [[0, 1, 2, 3, 0], [0, 4, 5, 6, 0]]


def test_slice_with_dynamic_start_and_size():
    n = TrtNet()
    x = n.input("x", trt.float32, (4, 5))
    s = n.net.add_slice(x, (0, 0), (1, 1), (1, 1))
    s.set_input(1, n.const(np.array([1, 2], np.int64)))
    s.set_input(2, n.const(np.array([2, 3], np.int64)))
    n.output(s.get_output(0), "y")
    x_value = np.arange(20, dtype=np.float32).reshape(4, 5)
    assert n.run(x=x_value)["y"].tolist() == [[7, 8, 9], [12, 13, 14]]


def test_slice_on_listed_axes_wraps_like_tile():
    n = TrtNet()
    x = n.input("x", trt.float32, (2, 2))
    s = n.net.add_slice(x, (0,), (6,), (1,))
    s.axes, s.mode = (1,), trt.SampleMode.WRAP         # axis 0 is taken whole
    n.output(s.get_output(0), "tiled")
    d = n.net.add_slice(x, (1,), (1,), (1,))
    d.axes = (-2,)
    d.set_input(2, n.const(np.array([1], np.int64)))   # dynamic size for the listed axis
    n.output(d.get_output(0), "row1")
    out = n.run(x=np.array([[1, 2], [3, 4]], np.float32))
    assert out["tiled"].tolist() == [[1, 2, 1, 2, 1, 2], [3, 4, 3, 4, 3, 4]]
    assert out["row1"].tolist() == [[3, 4]]


def test_concatenation_on_an_axis():
    n = TrtNet()
    a, b = n.input("a", trt.float32, (2, 1)), n.input("b", trt.float32, (2, 2))
    c = n.net.add_concatenation([a, b])
    c.axis = 1
    n.output(c.get_output(0), "y")
    out = n.run(a=np.array([[1], [2]], np.float32), b=np.array([[3, 4], [5, 6]], np.float32))
    assert out["y"].tolist() == [[1, 3, 4], [2, 5, 6]]


def test_gather_of_a_shape_dim_is_0d_int64():
    n = TrtNet()
    x = n.input("x", trt.float32, (5, 3, 2))
    shape = n.net.add_shape(x).get_output(0)
    n.output(n.net.add_gather(shape, n.const(np.array(1, np.int32)), 0).get_output(0), "dim1")
    n.output(n.net.add_gather(shape, n.const(np.array([2, 0], np.int32)), 0).get_output(0), "d20")
    out = n.run(x=np.zeros((5, 3, 2), np.float32))
    assert out["dim1"].shape == () and out["dim1"].dtype == np.int64 and out["dim1"] == 3
    assert out["d20"].tolist() == [2, 5]


def test_softmax_over_one_axis():
    n = TrtNet()
    x = n.input("x", trt.float32, (2, 3, 2))
    s = n.net.add_softmax(x)
    s.axes = 1 << 1
    n.output(s.get_output(0), "y")
    x_value = RNG.standard_normal((2, 3, 2)).astype(np.float32)
    expected = np.exp(x_value) / np.exp(x_value).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(n.run(x=x_value)["y"], expected, rtol=1e-6)


def test_elementwise_activation_unary_reduce_literals():
    n = TrtNet()
    x = n.input("x", trt.float32, (1, 4))
    y = n.const(np.array([[2, 2, 2, 2]], np.float32))
    for op in ("SUB", "DIV", "POW", "MAX", "LESS"):
        n.output(n.net.add_elementwise(x, y, getattr(E, op)).get_output(0), op)
    leaky = n.net.add_activation(x, A.LEAKY_RELU)
    leaky.alpha = 0.5
    clip = n.net.add_activation(x, A.CLIP)
    clip.alpha, clip.beta = -1.0, 1.0
    n.output(leaky.get_output(0), "leaky")
    n.output(clip.get_output(0), "clip")
    n.output(n.net.add_unary(x, trt.UnaryOperation.ABS).get_output(0), "abs")
    n.output(n.net.add_reduce(x, trt.ReduceOperation.SUM, 1 << 1, True).get_output(0), "sum")
    out = n.run(x=np.array([[-2, -1, 1, 4]], np.float32))
    assert out["SUB"].tolist() == [[-4, -3, -1, 2]]
    assert out["DIV"].tolist() == [[-1, -0.5, 0.5, 2]]
    assert out["POW"].tolist() == [[4, 1, 1, 16]]
    assert out["MAX"].tolist() == [[2, 2, 2, 4]]
    assert out["LESS"].tolist() == [[True, True, True, False]]
    assert out["leaky"].tolist() == [[-1, -0.5, 1, 4]]
    assert out["clip"].tolist() == [[-1, -1, 1, 1]]
    assert out["abs"].tolist() == [[2, 1, 1, 4]]
    assert out["sum"].tolist() == [[2]]


def test_fill_linspace_with_dynamic_shape_cast_and_select():
    n = TrtNet()
    x = n.input("x", trt.float32, (2, 3))
    fill = n.net.add_fill((0, 0), trt.FillOperation.LINSPACE, trt.float32)
    fill.set_input(0, n.net.add_shape(x).get_output(0))
    fill.set_input(1, n.const(np.array(1.0, np.float32)))
    fill.set_input(2, n.const(np.array([10.0, 1.0], np.float32)))
    ramp = fill.get_output(0)
    n.output(ramp, "ramp")
    as_int = n.net.add_cast(ramp, trt.int32).get_output(0)
    n.output(as_int, "as_int")
    big = n.net.add_elementwise(ramp, n.const(np.full((1, 1), 12, np.float32)), E.GREATER)
    n.output(n.net.add_select(big.get_output(0), ramp, x).get_output(0), "picked")
    out = n.run(x=np.zeros((2, 3), np.float32))
    assert out["ramp"].tolist() == [[1, 2, 3], [11, 12, 13]]
    assert out["as_int"].dtype == np.int32
    assert out["picked"].tolist() == [[0, 0, 0], [0, 0, 13]]


def test_layers_wired_out_of_order_by_set_input_still_evaluate():
    n = TrtNet()
    x = n.input("x", trt.float32, (3,))
    late = n.net.add_unary(x, trt.UnaryOperation.NEG)          # layer 0, rewired below
    early = n.net.add_unary(x, trt.UnaryOperation.ABS)         # layer 1
    late.set_input(0, early.get_output(0))                     # layer 0 now needs layer 1
    n.output(late.get_output(0), "y")
    assert n.run(x=np.array([-1, 2, -3], np.float32))["y"].tolist() == [-1, -2, -3]
    assert n.builds()


def test_unknown_layer_type_is_named():
    n = TrtNet()
    x = n.input("x", trt.float32, (4,))
    nonzero = n.net.add_non_zero(x)
    nonzero.name = "my_nonzero"
    n.output(nonzero.get_output(0), "y")
    with pytest.raises(NotImplementedError, match=r"'my_nonzero' \(NON_ZERO\)"):
        n.run(x=np.zeros(4, np.float32))


def test_feeds_must_match_the_inputs():
    n = TrtNet()
    n.output(n.net.add_identity(n.input("x", trt.float32, (2,))).get_output(0), "y")
    with pytest.raises(KeyError, match="missing"):
        n.run(y=np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="shape"):
        n.run(x=np.zeros(3, np.float32))


# --------------------------------------------------------------------------------------------
# Loops


def test_reverse_iterator_and_outputs_give_a_suffix_sum():
    """s_i = s_{i-1} + x[T-1-i]: CONCATENATE holds the suffix sums last-first, REVERSE in order."""
    n = TrtNet()
    x = n.input("x", trt.float32, (4, 2))
    T = n.const(np.array(4, np.int32))
    loop = n.net.add_loop()
    loop.add_trip_limit(T, trt.TripLimit.COUNT)
    xt = loop.add_iterator(x, 0, True).get_output(0)
    s = loop.add_recurrence(n.const(np.zeros(2, np.float32)))
    total = n.net.add_elementwise(s.get_output(0), xt, E.SUM).get_output(0)
    s.set_input(1, total)
    forward = loop.add_loop_output(total, trt.LoopOutput.CONCATENATE, 1)
    backward = loop.add_loop_output(total, trt.LoopOutput.REVERSE, 0)
    last = loop.add_loop_output(s.get_output(0), trt.LoopOutput.LAST_VALUE)
    for out in (forward, backward):
        out.set_input(1, T)
    for out, name in ((forward, "concat"), (backward, "reverse"), (last, "last")):
        n.output(out.get_output(0), name)
    x_value = np.array([[1, 10], [2, 20], [3, 30], [4, 40]], np.float32)
    out = n.run(x=x_value)
    assert out["reverse"].tolist() == [[10, 100], [9, 90], [7, 70], [4, 40]]
    assert out["concat"].tolist() == [[4, 7, 9, 10], [40, 70, 90, 100]]     # new axis 1
    assert out["last"].tolist() == [10, 100]
    assert n.builds()


def test_nested_loops_sum_rows():
    """Outer loop over rows, inner loop over a row's elements: row sums."""
    n = TrtNet()
    x = n.input("x", trt.float32, (3, 4))
    outer = n.net.add_loop()
    three, four = n.const(np.array(3, np.int64)), n.const(np.array(4, np.int64))
    outer.add_trip_limit(three, trt.TripLimit.COUNT)
    row = outer.add_iterator(x, 0).get_output(0)                       # [4]
    inner = n.net.add_loop()
    inner.add_trip_limit(four, trt.TripLimit.COUNT)
    element = inner.add_iterator(row, 0).get_output(0)                  # 0-D
    acc = inner.add_recurrence(n.const(np.array(0, np.float32)))
    acc.set_input(1, n.net.add_elementwise(acc.get_output(0), element, E.SUM).get_output(0))
    row_sum = inner.add_loop_output(acc.get_output(0), trt.LoopOutput.LAST_VALUE).get_output(0)
    sums = outer.add_loop_output(row_sum, trt.LoopOutput.CONCATENATE, 0)
    sums.set_input(1, three)
    n.output(sums.get_output(0), "sums")
    x_value = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert n.run(x=x_value)["sums"].tolist() == [6, 22, 38]


def test_last_value_of_a_non_recurrence_is_an_error():
    n = TrtNet()
    x = n.input("x", trt.float32, (2, 3))
    loop = n.net.add_loop()
    loop.add_trip_limit(n.const(np.array(2, np.int32)), trt.TripLimit.COUNT)
    xt = loop.add_iterator(x).get_output(0)
    doubled = n.net.add_elementwise(xt, xt, E.SUM).get_output(0)
    n.output(loop.add_loop_output(doubled, trt.LoopOutput.LAST_VALUE).get_output(0), "y")
    with pytest.raises(NetworkEvalError, match="not a recurrence output"):
        n.run(x=np.zeros((2, 3), np.float32))


def caffe_lstm_network(n: TrtNet, T: int, N: int, K: int, H: int, w_xc, b_c, w_hc):
    """tensorrt.md §1.2: x (T,N,K), cont (T,N), h0/c0 (N,H) in; y (T,N,H), hT, cT out."""
    x = n.input("x", trt.float32, (T, N, K))
    cont = n.input("cont", trt.float32, (T, N))
    h0, c0 = n.input("h0", trt.float32, (N, H)), n.input("c0", trt.float32, (N, H))
    # W_xc_x = x·W_xcᵀ + b_c for all T at once
    xw = n.net.add_matrix_multiply(x, M.NONE, n.const(w_xc.T[None]), M.NONE).get_output(0)
    xw = n.net.add_elementwise(xw, n.const(b_c.reshape(1, 1, -1)), E.SUM).get_output(0)
    steps = n.net.add_gather(n.net.add_shape(x).get_output(0), n.const(np.array(0, np.int32)),
                             0).get_output(0)
    cont3 = n.net.add_unsqueeze(cont, n.const(np.array([2], np.int64))).get_output(0)  # (T,N,1)
    loop = n.net.add_loop()
    loop.add_trip_limit(steps, trt.TripLimit.COUNT)
    xt = loop.add_iterator(xw, 0, False).get_output(0)
    ct = loop.add_iterator(cont3, 0, False).get_output(0)
    h_rec, c_rec = loop.add_recurrence(h0), loop.add_recurrence(c0)
    # h_conted = cont_t·h_{t-1}, c_conted = cont_t·c_{t-1}
    h = n.net.add_elementwise(h_rec.get_output(0), ct, E.PROD).get_output(0)
    c = n.net.add_elementwise(c_rec.get_output(0), ct, E.PROD).get_output(0)
    # gate_input = W_xc_x_t + h_conted·W_hcᵀ
    hw = n.net.add_matrix_multiply(h, M.NONE, n.const(w_hc.T), M.NONE).get_output(0)
    g = n.net.add_elementwise(xt, hw, E.SUM).get_output(0)

    def gate(k, act):
        part = n.net.add_slice(g, (0, k * H), (N, H), (1, 1)).get_output(0)
        return n.net.add_activation(part, act).get_output(0)

    i, f, o, gg = gate(0, A.SIGMOID), gate(1, A.SIGMOID), gate(2, A.SIGMOID), gate(3, A.TANH)
    # c_t = f·c_conted + i·g ; h_t = o·tanh(c_t)
    c_new = n.net.add_elementwise(n.net.add_elementwise(f, c, E.PROD).get_output(0),
                                  n.net.add_elementwise(i, gg, E.PROD).get_output(0),
                                  E.SUM).get_output(0)
    tanh_c = n.net.add_activation(c_new, A.TANH).get_output(0)
    h_new = n.net.add_elementwise(o, tanh_c, E.PROD).get_output(0)
    h_rec.set_input(1, h_new)
    c_rec.set_input(1, c_new)
    y = loop.add_loop_output(h_new, trt.LoopOutput.CONCATENATE, 0)
    y.set_input(1, steps)
    n.output(y.get_output(0), "y")
    n.output(loop.add_loop_output(h_rec.get_output(0), trt.LoopOutput.LAST_VALUE).get_output(0),
             "hT")
    n.output(loop.add_loop_output(c_rec.get_output(0), trt.LoopOutput.LAST_VALUE).get_output(0),
             "cT")


@pytest.fixture
def lstm_case():
    T, N, K, H = 6, 3, 4, 5
    w_xc = (RNG.standard_normal((4 * H, K)) * 0.5).astype(np.float32)
    b_c = (RNG.standard_normal(4 * H) * 0.5).astype(np.float32)
    w_hc = (RNG.standard_normal((4 * H, H)) * 0.5).astype(np.float32)
    x = RNG.standard_normal((T, N, K)).astype(np.float32)
    # h0/c0 are not zero: cont_0 = 0 must wipe them (torch starts from zeros)
    state = {"h0": RNG.standard_normal((N, H)).astype(np.float32),
             "c0": RNG.standard_normal((N, H)).astype(np.float32)}
    n = TrtNet()
    caffe_lstm_network(n, T, N, K, H, w_xc, b_c, w_hc)
    return n, x, state, (w_xc, b_c, w_hc)


def test_caffe_lstm_loop_matches_torch(lstm_case):
    n, x, state, weights = lstm_case
    cont = np.ones(x.shape[:2], np.float32)
    cont[0] = 0
    out = n.run(x=x, cont=cont, **state)
    y, h, c = torch_lstm(x, *weights)
    np.testing.assert_allclose(out["y"], y, atol=1e-5)
    np.testing.assert_allclose(out["hT"], h, atol=1e-5)
    np.testing.assert_allclose(out["cT"], c, atol=1e-5)
    assert out["y"].shape == (6, 3, 5) and out["y"].dtype == np.float32
    assert n.builds()


def test_caffe_lstm_cont_zero_restarts_a_sequence(lstm_case):
    n, x, state, weights = lstm_case
    cont = np.ones(x.shape[:2], np.float32)
    cont[0] = cont[4] = 0                     # two sequences: steps 0-3 and 4-5
    out = n.run(x=x, cont=cont, **state)
    first, _, _ = torch_lstm(x[:4], *weights)
    second, h, c = torch_lstm(x[4:], *weights)
    np.testing.assert_allclose(out["y"], np.concatenate([first, second]), atol=1e-5)
    np.testing.assert_allclose(out["hT"], h, atol=1e-5)
    np.testing.assert_allclose(out["cT"], c, atol=1e-5)


def test_fp16_matmul_between_casts():
    n = TrtNet()
    x = n.input("x", trt.float32, (3, 8))
    w = RNG.standard_normal((8, 4)).astype(np.float16)
    x16 = n.net.add_cast(x, trt.float16).get_output(0)
    y16 = n.net.add_matrix_multiply(x16, M.NONE, n.const(w), M.NONE).get_output(0)
    n.output(y16, "y16")
    n.output(n.net.add_cast(y16, trt.float32).get_output(0), "y")
    x_value = RNG.standard_normal((3, 8)).astype(np.float32)
    out = n.run(x=x_value)
    assert out["y16"].dtype == np.float16 and out["y"].dtype == np.float32
    expected = x_value @ w.astype(np.float32)
    np.testing.assert_allclose(out["y"], expected, rtol=1e-2, atol=1e-2)
    assert not np.array_equal(out["y"], expected)             # really rounded through fp16
    assert n.builds()
