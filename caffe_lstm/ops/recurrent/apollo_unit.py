"""apollocaffe's LstmUnit: one LSTM step with its own weights, from an input x (N, K) and the
memory c_prev (N, C); tops h (N, C), c (N, C). Nets hand-unroll grid and tree LSTMs with it,
concatenating the previous outputs into x themselves (the layer has no recurrent input).

From the fork's Forward_cpu (lstm_unit_layer.cpp), with W_g, W_i, W_f, W_o its four blobs
(1, C, 1, K) in that order and no bias:

    g = τ(x·W_gᵀ), i = σ(x·W_iᵀ), f = σ(x·W_fᵀ), o = σ(x·W_oᵀ)
    c = f ⊙ c_prev + i ⊙ g
    h = o ⊙ τ(c)

where τ is the fork's own tanh: tanh(v) for |v| < 5, else sign(v) (it saturates early).

A one-step layer with its own facets, not an expansion on the step API: no loop, no carried
state, and τ is no Caffe layer (docs/recurrent-extensions.md, "LstmUnit").
"""

from __future__ import annotations

import numpy as np

from caffe_lstm.ir.graph import Node, Shape
from caffe_lstm.ops.recurrent.equations import sigmoid
from caffe_lstm.ops.registry import Op, count, register_op, shape_error

#: The blobs in the fork's order: the input value (candidate), then the three gates.
BLOBS = ("W_g", "W_i", "W_f", "W_o")
#: Where the fork's tanh stops computing and returns ±1.
SATURATION = 5.0


def fork_tanh(x: np.ndarray) -> np.ndarray:
    """τ(v) = tanh(v) where |v| < 5, else sign(v): the fork's tanh."""
    return np.where(np.abs(x) < SATURATION, np.tanh(x), np.sign(x))


def _sizes(node: Node, x: Shape, memory: Shape) -> tuple[int, int, int]:
    """N, K, C: x is (N, K) (trailing axes of 1 allowed, as apollocaffe's 4-D blobs),
    memory (N, C) with C = num_cells."""
    cells = node.attrs["num_cells"]
    if cells <= 0:
        raise shape_error(node, f"num_cells is {cells}, expected > 0",
                          "set lstm_unit_param.num_cells")
    if len(x) < 2 or count(x, 2) != 1:
        raise shape_error(node, f"x must be (N, K) (trailing axes of 1 allowed), found {x}",
                          "the first bottom is the step's input, the previous outputs "
                          "concatenated in")
    if len(memory) < 2 or memory[0] != x[0] or memory[1] != cells or count(memory, 2) != 1:
        raise shape_error(node, f"the memory must be (N, C) = ({x[0]}, {cells}), found {memory}",
                          "the second bottom is the previous cell, num_cells wide")
    return x[0], x[1], cells


@register_op
class LstmUnit(Op):
    """apollocaffe's LstmUnit (lstm_unit_param: num_cells C), the equations of the module.
    Bottoms x (N, K), c_prev (N, C); tops h (N, C), c (N, C); blobs W_g, W_i, W_f, W_o, each
    (1, C, 1, K)."""

    type = "LstmUnit"
    origin = ("apollocaffe (Russell91/apollocaffe; schema as LihangLiu93/apollocaffe@1cbe021, "
              "lstm_unit_param 201 there; lstm_unit_layer.cpp Forward_cpu)")
    limits = "the later tie_output_forget and tanh_hidden options are not in its schema"
    param = "lstm_unit_param"
    n_bottoms = (2, 2)
    n_tops = (2, 2)

    @staticmethod
    def parse(ctx, p):
        return {"num_cells": p.num_cells}

    @staticmethod
    def infer(ctx, node: Node, x: Shape, memory: Shape) -> tuple[Shape, ...]:
        batch, _, cells = _sizes(node, x, memory)
        return (batch, cells), (batch, cells)

    @staticmethod
    def blobs(ctx, node: Node, x: Shape, memory: Shape) -> tuple[tuple[str, Shape], ...]:
        _, inputs, cells = _sizes(node, x, memory)
        return tuple((name, (1, cells, 1, inputs)) for name in BLOBS)

    @staticmethod
    def numpy(ctx, node: Node, x, memory, *weights):
        batch = x.shape[0]
        x = np.asarray(x, np.float64).reshape(batch, -1)
        c_prev = np.asarray(memory, np.float64).reshape(batch, -1)
        w = {name: np.asarray(blob, np.float64).reshape(c_prev.shape[1], -1)
             for name, blob in zip(BLOBS, weights)}
        # g = τ(x·W_gᵀ), i = σ(x·W_iᵀ), f = σ(x·W_fᵀ), o = σ(x·W_oᵀ)
        g = fork_tanh(x @ w["W_g"].T)
        i, f, o = (sigmoid(x @ w[name].T) for name in ("W_i", "W_f", "W_o"))
        # c = f ⊙ c_prev + i ⊙ g; h = o ⊙ τ(c)
        c = f * c_prev + i * g
        h = o * fork_tanh(c)
        return h.astype(np.float32), c.astype(np.float32)

    @staticmethod
    def tensorrt(ctx, node: Node, x, memory, *weights):
        trt, net = ctx.trt, ctx.network
        x2 = ctx.reshape(x, [0, -1], "x_rows")
        c_prev = ctx.reshape(memory, [0, -1], "c_prev_rows")

        def project(name, blob):
            w_t = np.ascontiguousarray(blob.reshape(blob.shape[1], -1).T)
            none = trt.MatrixOperation.NONE
            return ctx.out(net.add_matrix_multiply(x2, none, ctx.constant(w_t, name), none),
                           f"{name}_x")

        def act(kind, t, suffix):
            return ctx.out(net.add_activation(t, kind), suffix)

        def op(kind, left, right, suffix):
            return ctx.out(net.add_elementwise(left, right, kind), suffix)

        def tau(t, suffix):
            # τ(v) = tanh(v) where |v| < 5, else sign(v)
            absolute = ctx.out(net.add_unary(t, trt.UnaryOperation.ABS), f"{suffix}_abs")
            bound = ctx.constant(np.full((1, 1), SATURATION, np.float32), f"{suffix}_bound")
            inside = op(trt.ElementWiseOperation.LESS, absolute, bound, f"{suffix}_inside")
            sign = ctx.out(net.add_unary(t, trt.UnaryOperation.SIGN), f"{suffix}_sign")
            return ctx.out(net.add_select(inside, act(trt.ActivationType.TANH, t,
                                                      f"{suffix}_tanh"), sign), suffix)

        a = {name: project(name, blob) for name, blob in zip(BLOBS, weights)}
        sigmoid = trt.ActivationType.SIGMOID
        prod, add = trt.ElementWiseOperation.PROD, trt.ElementWiseOperation.SUM
        g = tau(a["W_g"], "g")
        i, f, o = (act(sigmoid, a[f"W_{k}"], k) for k in ("i", "f", "o"))
        c = op(add, op(prod, f, c_prev, "f_c"), op(prod, i, g, "i_g"), "c")
        h = op(prod, o, tau(c, "tau_c"), "h")
        return h, c

    @staticmethod
    def onnx(ctx, node: Node, x: str, memory: str, *weights: str) -> tuple[str, ...]:
        def one(op_type, inputs, suffix, **attrs):
            return ctx.add(op_type, inputs, suffix=suffix, **attrs)[0]

        x2 = one("Reshape", [x, ctx.ints([0, -1], "x_rows_shape")], "x_rows")
        c_prev = one("Reshape", [memory, ctx.ints([0, -1], "c_rows_shape")], "c_prev_rows")

        def project(name, value):
            blob = value.data
            w_t = np.ascontiguousarray(blob.reshape(blob.shape[1], -1).T, np.float32)
            return one("MatMul", [x2, ctx.constant(w_t, f"{name}_t")], f"{name}_x")

        def tau(v, suffix):
            # τ(v) = tanh(v) where |v| < 5, else sign(v)
            inside = one("Less", [one("Abs", [v], f"{suffix}_abs"),
                                  ctx.scalar(SATURATION, f"{suffix}_bound")], f"{suffix}_inside")
            return one("Where", [inside, one("Tanh", [v], f"{suffix}_tanh"),
                                 one("Sign", [v], f"{suffix}_sign")], suffix)

        a = {name: project(name, value) for name, value in zip(BLOBS, node.weights)}
        g = tau(a["W_g"], "g")
        i, f, o = (one("Sigmoid", [a[f"W_{k}"]], k) for k in ("i", "f", "o"))
        # c = f ⊙ c_prev + i ⊙ g   (named after top c at once: the facet itself reads it)
        c = ctx.add("Add", [one("Mul", [f, c_prev], "f_c"), one("Mul", [i, g], "i_g")],
                    [node.outputs[1].name], suffix="c")[0]
        h = one("Mul", [o, tau(c, "tau_c")], "h")
        return h, c
