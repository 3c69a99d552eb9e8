"""BVLC Caffe's LSTMUnit layer: one LSTM time step without weights (lstm_unit_layer.cpp), the
cell that Caffe's own unrolled LSTM net calls once per step and that hand-unrolled nets use."""

from __future__ import annotations

import numpy as np

from caffe_lstm.ir.graph import Node, Shape
from caffe_lstm.ops.recurrent.cell import CAFFE_GATES
from caffe_lstm.ops.recurrent.equations import sigmoid
from caffe_lstm.ops.registry import Op, register_op, shape_error


def _check_step(node: Node, what: str, shape: Shape, rank: int, batch: int | None) -> None:
    """``shape`` is ``rank``-D with axis 0 = 1 (one time step) and, given ``batch``, axis 1 = N."""
    if len(shape) != rank or shape[0] != 1 or (batch is not None and shape[1] != batch):
        expected = "(1, N, …)" if rank == 3 else "(1, N)"
        raise shape_error(node, f"{what} must be {rank}-D {expected}"
                          f"{f' with N = {batch}' if batch is not None else ''}, found {shape}",
                          "LSTMUnit computes one time step: bottoms c_prev (1, N, H), "
                          "gates (1, N, 4H), cont (1, N)")


@register_op
class LSTMUnit(Op):
    """One LSTM step from the gate pre-activations (no parameters, no blobs).

    Bottoms c_prev (1, N, H), X (1, N, 4H) with gate blocks [a_i | a_f | a_o | a_g], cont
    (1, N); tops c (1, N, H), h (1, N, H). With cont broadcast over H:
    i = σ(a_i), f = cont·σ(a_f), o = σ(a_o), g = tanh(a_g);
    c = f ⊙ c_prev + i ⊙ g; h = o ⊙ tanh(c).
    cont multiplies the forget gate only: the caller masks h_{t−1} itself (Caffe's h_conted
    Scale before the recurrent InnerProduct).
    """

    type = "LSTMUnit"
    n_bottoms = (3, 3)
    n_tops = (2, 2)

    @staticmethod
    def infer(ctx, node: Node, c_prev: Shape, x: Shape, cont: Shape) -> tuple[Shape, ...]:
        _check_step(node, "c_prev", c_prev, 3, None)
        batch, hidden = c_prev[1], c_prev[2]
        _check_step(node, "gates", x, 3, batch)
        _check_step(node, "cont", cont, 2, batch)
        if x[2] != len(CAFFE_GATES) * hidden:
            raise shape_error(node, f"gates must be (1, N, 4H) = (1, {batch}, "
                              f"{len(CAFFE_GATES) * hidden}) for H = {hidden}, found {x}",
                              "bottom 0 is c_prev (1, N, H), bottom 1 the 4H gate inputs")
        return c_prev, c_prev

    @staticmethod
    def numpy(ctx, node: Node, c_prev, x, cont):
        c_prev, x = np.asarray(c_prev, np.float64), np.asarray(x, np.float64)
        cont = np.asarray(cont, np.float64)[:, :, None]
        a = dict(zip(CAFFE_GATES, np.split(x, len(CAFFE_GATES), axis=2)))
        # i = σ(a_i), f = cont·σ(a_f), o = σ(a_o), g = tanh(a_g)
        i, f, o, g = sigmoid(a["i"]), cont * sigmoid(a["f"]), sigmoid(a["o"]), np.tanh(a["g"])
        # c = f ⊙ c_prev + i ⊙ g
        c = f * c_prev + i * g
        # h = o ⊙ tanh(c)
        h = o * np.tanh(c)
        return c.astype(np.float32), h.astype(np.float32)

    @staticmethod
    def tensorrt(ctx, node: Node, c_prev, x, cont):
        trt = ctx.trt
        hidden = node.inputs[0].shape[2]
        a = {gate: _trt_block(ctx, x, k, hidden, f"a_{gate}") for k, gate in enumerate(CAFFE_GATES)}

        def act(kind, t, suffix):
            return ctx.out(ctx.network.add_activation(t, kind), suffix)

        def op(kind, left, right, suffix):
            return ctx.out(ctx.network.add_elementwise(left, right, kind), suffix)

        sigmoid, tanh = trt.ActivationType.SIGMOID, trt.ActivationType.TANH
        prod, add = trt.ElementWiseOperation.PROD, trt.ElementWiseOperation.SUM
        # i = σ(a_i), f = cont·σ(a_f), o = σ(a_o), g = tanh(a_g)
        i, o, g = act(sigmoid, a["i"], "i"), act(sigmoid, a["o"], "o"), act(tanh, a["g"], "g")
        f = op(prod, ctx.unsqueeze(cont, 2, "cont"), act(sigmoid, a["f"], "sigma_f"), "f")
        # c = f ⊙ c_prev + i ⊙ g
        c = op(add, op(prod, f, c_prev, "f_c"), op(prod, i, g, "i_g"), "c")
        # h = o ⊙ tanh(c)
        h = op(prod, o, act(tanh, c, "tanh_c"), "h")
        return c, h

    @staticmethod
    def onnx(ctx, node: Node, c_prev: str, x: str, cont: str) -> tuple[str, ...]:
        hidden = node.inputs[0].shape[2]
        a = {gate: ctx.add("Slice", [x, ctx.ints([k * hidden], "start"),
                                     ctx.ints([(k + 1) * hidden], "end"), ctx.ints([2], "axis")],
                           suffix=f"a_{gate}")[0]
             for k, gate in enumerate(CAFFE_GATES)}

        def one(op_type, inputs, suffix):
            return ctx.add(op_type, inputs, suffix=suffix)[0]

        # i = σ(a_i), f = cont·σ(a_f), o = σ(a_o), g = tanh(a_g)
        i, o, g = (one("Sigmoid", [a["i"]], "i"), one("Sigmoid", [a["o"]], "o"),
                   one("Tanh", [a["g"]], "g"))
        f = one("Mul", [ctx.unsqueeze(cont, [2], "cont"), one("Sigmoid", [a["f"]], "sigma_f")],
                "f")
        # c = f ⊙ c_prev + i ⊙ g   (named after top c at once: the facet itself reads it)
        c = ctx.add("Add", [one("Mul", [f, c_prev], "f_c"), one("Mul", [i, g], "i_g")],
                    [node.outputs[0].name], suffix="c")[0]
        # h = o ⊙ tanh(c)
        h = one("Mul", [o, one("Tanh", [c], "tanh_c")], "h")
        return c, h


def _trt_block(ctx, x, index: int, hidden: int, suffix: str):
    """Gate block ``index`` of x: x[:, :, index·H : (index + 1)·H], the other axes whole."""
    layer = ctx.network.add_slice(x, (index * hidden,), (hidden,), (1,))
    layer.axes = (2,)
    return ctx.out(layer, suffix)
