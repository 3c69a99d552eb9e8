"""Learned linear maps: InnerProduct and Embed."""

from __future__ import annotations

import numpy as np

from caffe_lstm.errors import ExecutionError
from caffe_lstm.ir.graph import Node, Shape
from caffe_lstm.ops.registry import Op, canonical_axis, count, register_op, shape_error
from caffe_lstm.ops.unit_output import unit_output_blobs


@register_op
class InnerProduct(Op):
    """y = x_flat · Wᵀ + b, x flattened from ``axis`` on (inner_product_param).

    W is (num_output, K), or (K, num_output) with ``transpose``; K = count(axis) of x.
    """

    type = "InnerProduct"
    param = "inner_product_param"

    @staticmethod
    def parse(ctx, p):
        return InnerProduct.make_attrs(p.num_output, bias_term=p.bias_term, axis=p.axis,
                                       transpose=p.transpose)

    @staticmethod
    def make_attrs(num_output: int, *, bias_term: bool = True, axis: int = 1,
                   transpose: bool = False) -> dict:
        """The node attributes (inner_product_param's fields, its defaults)."""
        return {"num_output": num_output, "bias_term": bias_term, "axis": axis,
                "transpose": transpose}

    @staticmethod
    def infer(ctx, node: Node, x: Shape) -> tuple[Shape, ...]:
        axis = canonical_axis(node, node.attrs["axis"], len(x))
        if node.attrs["num_output"] <= 0:
            raise shape_error(node, "num_output is 0", "set inner_product_param.num_output")
        return (x[:axis] + (node.attrs["num_output"],),)

    @staticmethod
    def blobs(ctx, node: Node, x: Shape) -> tuple[tuple[str, Shape], ...]:
        axis = canonical_axis(node, node.attrs["axis"], len(x))
        k, n = count(x, axis), node.attrs["num_output"]
        weight = ("weight", (k, n) if node.attrs["transpose"] else (n, k))
        return (weight, ("bias", (n,))) if node.attrs["bias_term"] else (weight,)

    @staticmethod
    def calibrate(node: Node, rng, inputs, blobs):
        """Unit output, its channels (the last axis) centred where offsets dominate
        (ops/unit_output.py)."""
        (output,) = InnerProduct.numpy(None, node, *inputs, *blobs)
        return unit_output_blobs(output, blobs, output.ndim - 1)

    @staticmethod
    def numpy(ctx, node: Node, x, w, b=None):
        axis = canonical_axis(node, node.attrs["axis"], x.ndim)
        x_flat = x.reshape(count(x.shape, 0, axis), -1)
        y = _product(x_flat, w.T if node.attrs["transpose"] else w)
        if b is not None:
            # in place: y is the product just made, and a second (count, num_output) array
            # (26 MB for an LSTM's input projection at T·N = 3200) would cost its page faults
            y += b
        return (y.reshape(x.shape[:axis] + (node.attrs["num_output"],)),)

    @staticmethod
    def tensorrt(ctx, node: Node, x, w, b=None):
        # x flattened from axis on: dims before axis are copied (0), the rest merged (-1)
        axis = canonical_axis(node, node.attrs["axis"], len(x.shape))
        x_flat = ctx.reshape(x, [0] * axis + [-1], "flatten")
        # y = x_flat · Wᵀ, W broadcast over the leading dims as (1, ..., K, num_output), of
        # x_flat's rank axis + 1; axis 0 flattens x to one vector (K,)
        w_t = w if node.attrs["transpose"] else w.T
        weight = ctx.constant(w_t.reshape((1,) * max(axis - 1, 0) + w_t.shape), "weight")
        x_op = ctx.trt.MatrixOperation.VECTOR if axis == 0 else ctx.trt.MatrixOperation.NONE
        mm = ctx.network.add_matrix_multiply(x_flat, x_op, weight, ctx.trt.MatrixOperation.NONE)
        y = ctx.out(mm, "matmul" if b is not None else "")
        if b is None:
            return (y,)
        bias = ctx.constant(b.reshape((1,) * axis + b.shape), "bias")
        return (ctx.out(ctx.network.add_elementwise(y, bias, ctx.trt.ElementWiseOperation.SUM)),)

    @staticmethod
    def onnx(ctx, node: Node, x, w, b=None):
        rank = len(node.inputs[0].shape)
        axis = canonical_axis(node, node.attrs["axis"], rank)
        # x_flat = x with the axes from axis on merged: ONNX Reshape's 0 copies the dim at the
        # same index, so [0]*axis + [-1] keeps the leading dims whatever T and N are
        if axis != rank - 1:
            x = ctx.add("Reshape", [x, ctx.ints([0] * axis + [-1], "flat_shape")],
                        suffix="flatten")[0]
        # y = x_flat · Wᵀ: MatMul broadcasts (K, num_output) over the leading dims (axis 0: x
        # is one vector (K,)). W (num_output, K) is transposed by a Transpose node that
        # runtimes fold, so the initializer keeps the caffemodel's bytes as they are.
        w_t = w if node.attrs["transpose"] else ctx.add("Transpose", [w], suffix="weight_t",
                                                         perm=[1, 0])[0]
        y = ctx.add("MatMul", [x, w_t], suffix="" if b is None else "matmul")[0]
        return (y,) if b is None else (ctx.add("Add", [y, b])[0],)


# Below this many rows, x · Wᵀ is computed as (W · xᵀ)ᵀ: the same products (summed in another
# order, so the last bits differ), as a product whose output has few columns, for which
# OpenBLAS's kernels are 1.2-3x faster (an LSTM's recurrent product, N = 16 rows of H = 512
# against 4H = 2048 outputs: 0.20 ms against 0.31 ms on 2 cores; on a VM whose host delays the
# second core it is 0.45 ms for stretches of seconds: benchmarks/README.md). One row is a
# vector product either way; from about 128 rows on the two forms are equal.
_FEW_ROWS = 128


def _product(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x · wᵀ for x (M, K) and w (N, K) (a transposed view when the blob is (K, N)); a fresh
    array that the caller may update in place. Its memory order is Fortran's for few rows."""
    if 1 < x.shape[0] < _FEW_ROWS:
        return (w @ x.T).T
    return x @ w.T


@register_op
class Embed(Op):
    """y = W[int(x)] + b: a row lookup; W is (input_dim, num_output) (embed_param).

    Indices arrive as floats and are truncated toward zero, as Caffe does.
    """

    type = "Embed"
    param = "embed_param"

    @staticmethod
    def parse(ctx, p):
        return {"num_output": p.num_output, "input_dim": p.input_dim, "bias_term": p.bias_term}

    @staticmethod
    def infer(ctx, node: Node, x: Shape) -> tuple[Shape, ...]:
        if node.attrs["num_output"] <= 0 or node.attrs["input_dim"] <= 0:
            raise shape_error(node, "num_output and input_dim must be > 0",
                              "set embed_param.num_output and embed_param.input_dim")
        return (x + (node.attrs["num_output"],),)

    @staticmethod
    def blobs(ctx, node: Node, x: Shape) -> tuple[tuple[str, Shape], ...]:
        weight = ("weight", (node.attrs["input_dim"], node.attrs["num_output"]))
        return (weight, ("bias", (node.attrs["num_output"],))) if node.attrs["bias_term"] else (
            weight,)

    @staticmethod
    def numpy(ctx, node: Node, x, w, b=None):
        index = np.trunc(x).astype(np.int64)
        if index.size and (index.min() < 0 or index.max() >= node.attrs["input_dim"]):
            bad = index.min() if index.min() < 0 else index.max()
            raise ExecutionError(
                f"index {bad} is outside [0, {node.attrs['input_dim']})", node.label,
                "check the word ids fed to this layer")
        y = w[index]
        return (y + b if b is not None else y,)

    @staticmethod
    def tensorrt(ctx, node: Node, x, w, b=None):
        # the ids as Caffe reads them: truncated toward zero, then gathered as rows of W
        index = ctx.cast(_truncated(ctx, ctx.float32_source(x)), ctx.trt.DataType.INT32, "index")
        gather = ctx.network.add_gather(ctx.constant(w, "weight"), index, 0)
        y = ctx.out(gather, "" if b is None else "gather")
        if b is None:
            return (y,)
        bias = ctx.constant(b.reshape((1,) * len(x.shape) + b.shape), "bias")
        return (ctx.out(ctx.network.add_elementwise(y, bias, ctx.trt.ElementWiseOperation.SUM)),)

    @staticmethod
    def onnx(ctx, node: Node, x, w, b=None):
        # trunc(x) = sign(x) · floor(|x|), as Caffe's static_cast<int>: whole numbers, so the
        # Cast to int64 is exact whatever rounding a runtime's Cast uses
        floor = ctx.add("Floor", [ctx.add("Abs", [x], suffix="abs")[0]], suffix="floor")[0]
        trunc = ctx.add("Mul", [ctx.add("Sign", [x], suffix="sign")[0], floor],
                        suffix="trunc")[0]
        index = ctx.add("Cast", [trunc], suffix="index", to=7)[0]  # 7 = TensorProto.INT64
        # y = W[index] (+ b): rows of W (input_dim, num_output), shape x.shape + (num_output,)
        y = ctx.add("Gather", [w, index], suffix="" if b is None else "gather", axis=0)[0]
        return (y,) if b is None else (ctx.add("Add", [y, b])[0],)


def _truncated(ctx, x):
    """trunc(x) = sign(x) · floor(|x|): whole numbers, so the cast to int is exact whatever
    rounding TensorRT's cast uses."""
    unary = ctx.trt.UnaryOperation
    floor = ctx.out(ctx.network.add_unary(
        ctx.out(ctx.network.add_unary(x, unary.ABS), "abs"), unary.FLOOR), "floor")
    sign = ctx.out(ctx.network.add_unary(x, unary.SIGN), "sign")
    return ctx.out(ctx.network.add_elementwise(sign, floor, ctx.trt.ElementWiseOperation.PROD),
                   "trunc")
