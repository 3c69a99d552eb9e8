"""Element-wise arithmetic: Eltwise, Scale, Bias, Power."""

from __future__ import annotations

from functools import reduce

import numpy as np

from caffe_lstm.ir.graph import Node, Shape
from caffe_lstm.ops.registry import Op, canonical_axis, register_op, shape_error

ELTWISE_OPERATIONS = ("PROD", "SUM", "MAX")


@register_op
class Eltwise(Op):
    """y = x_0 ⊙ x_1 ⊙ … (PROD), Σ coeff_i·x_i (SUM) or max_i x_i (MAX) (eltwise_param).

    All bottoms must have the same shape: Caffe does not broadcast. ``coeff`` (SUM only) gives
    one factor per bottom, default 1 each; ``stable_prod_grad`` is backward-only.
    """

    type = "Eltwise"
    param = "eltwise_param"
    n_bottoms = (2, None)

    @staticmethod
    def parse(ctx, p):
        return Eltwise.make_attrs(p.operation, list(p.coeff))

    @staticmethod
    def make_attrs(operation: str = "SUM", coeff: list[float] | None = None) -> dict:
        """The node attributes (eltwise_param's fields, its defaults)."""
        return {"operation": operation, "coeff": list(coeff or [])}

    @staticmethod
    def infer(ctx, node: Node, *shapes: Shape) -> tuple[Shape, ...]:
        if len(shapes) < 2:
            raise shape_error(node, f"expected at least 2 bottoms, found {len(shapes)}")
        _check_eltwise_params(node, len(shapes))
        for index, shape in enumerate(shapes[1:], start=1):
            if shape != shapes[0]:
                raise shape_error(
                    node, f"bottom {index} has shape {shape}, expected {shapes[0]} like bottom 0",
                    "Eltwise does not broadcast; use Scale or Bias for that")
        return (shapes[0],)

    @staticmethod
    def numpy(ctx, node: Node, *bottoms):
        operation = node.attrs["operation"]
        if operation == "PROD":
            return (reduce(np.multiply, bottoms),)
        if operation == "MAX":
            return (reduce(np.maximum, bottoms),)
        coeffs = node.attrs.get("coeff") or [1.0] * len(bottoms)
        # y = Σ coeff_i · x_i; a coeff of 1 needs no product (1·x is x, bit for bit)
        return (reduce(np.add, (x if c == 1 else np.float32(c) * x
                                for c, x in zip(coeffs, bottoms))),)

    @staticmethod
    def tensorrt(ctx, node: Node, *bottoms):
        ops = ctx.trt.ElementWiseOperation
        operation = node.attrs["operation"]
        if operation == "SUM":  # y = Σ coeff_i · x_i; a coeff of 1 needs no product
            coeffs = node.attrs.get("coeff") or [1.0] * len(bottoms)
            bottoms = [x if c == 1 else _times(ctx, x, c, f"coeff{i}")
                       for i, (c, x) in enumerate(zip(coeffs, bottoms))]
        combine = {"PROD": ops.PROD, "SUM": ops.SUM, "MAX": ops.MAX}[operation]
        y = bottoms[0]
        for index, x in enumerate(bottoms[1:], start=1):
            last = index == len(bottoms) - 1  # the last layer carries the node's plain name
            y = ctx.out(ctx.network.add_elementwise(y, x, combine), "" if last else f"{index}")
        return (y,)

    @staticmethod
    def onnx(ctx, node: Node, *bottoms):
        operation = node.attrs["operation"]
        if operation == "MAX":  # y = max_i x_i, one variadic Max
            return (ctx.add("Max", list(bottoms))[0],)
        if operation == "SUM":  # y = Σ coeff_i · x_i, one variadic Sum; a coeff of 1 is no Mul
            coeffs = node.attrs.get("coeff") or [1.0] * len(bottoms)
            terms = [x if c == 1 else ctx.add("Mul", [x, ctx.scalar(c, f"coeff{i}")],
                                              suffix=f"coeff{i}_x")[0]
                     for i, (c, x) in enumerate(zip(coeffs, bottoms))]
            return (ctx.add("Sum", terms)[0],)
        # y = x_0 ⊙ x_1 ⊙ …: Mul is binary, a chain in bottom order as numpy's reduce
        y = bottoms[0]
        for index, x in enumerate(bottoms[1:], start=1):
            last = index == len(bottoms) - 1
            y = ctx.add("Mul", [y, x], suffix="" if last else f"{index}")[0]
        return (y,)


def _check_eltwise_params(node: Node, n_bottoms: int) -> None:
    """Caffe's eltwise_layer.cpp LayerSetUp checks on ``operation`` and ``coeff``."""
    operation, coeff = node.attrs["operation"], node.attrs.get("coeff") or []
    if operation not in ELTWISE_OPERATIONS:
        raise shape_error(node, f"operation {operation!r} is unknown",
                          f"use one of {', '.join(ELTWISE_OPERATIONS)}")
    if coeff and operation == "PROD":
        raise shape_error(node, f"coeff given for operation PROD, found {coeff}",
                          "coeff applies to SUM only")
    if coeff and len(coeff) != n_bottoms:
        raise shape_error(node, f"expected one coeff per bottom ({n_bottoms}), found {len(coeff)}")


#: How far ``weights init`` draws Scale's γ from 1 and β from 0 (its ``calibrate``).
GAMMA_SPREAD, BETA_SPREAD = 0.2, 0.1


@register_op
class Scale(Op):
    """y = x ⊙ s (+ b), s broadcast over x from ``axis`` (scale_param).

    With two bottoms, bottom 1 is s; otherwise s is learned blob 0 of shape
    x.shape[axis : axis+num_axes] (num_axes −1 = to the end, 0 = a scalar). ``bias_term`` adds a
    learned bias b of s's shape. Element (outer, d, inner) of x is multiplied by s[d].
    """

    type = "Scale"
    param = "scale_param"
    n_bottoms = (1, 2)

    @staticmethod
    def parse(ctx, p):
        return Scale.make_attrs(axis=p.axis, num_axes=p.num_axes, bias_term=p.bias_term)

    @staticmethod
    def make_attrs(*, axis: int = 1, num_axes: int = 1, bias_term: bool = False) -> dict:
        """The node attributes (scale_param's fields, its defaults)."""
        return {"axis": axis, "num_axes": num_axes, "bias_term": bias_term}

    @staticmethod
    def infer(ctx, node: Node, x: Shape, s: Shape | None = None) -> tuple[Shape, ...]:
        aligned_axis(node, x, learned_operand_shape(node, x) if s is None else s, "scale")
        return (x,)

    @staticmethod
    def blobs(ctx, node: Node, x: Shape, s: Shape | None = None) -> tuple[tuple[str, Shape], ...]:
        bias_term = node.attrs["bias_term"]
        if s is not None:  # two bottoms: only the optional bias is learned
            return (("bias", s),) if bias_term else ()
        shape = learned_operand_shape(node, x)
        return (("scale", shape), ("bias", shape)) if bias_term else (("scale", shape),)

    @staticmethod
    def calibrate(node: Node, rng, inputs, blobs):
        """γ near 1 and β near 0, where Caffe starts them (constant 1 and 0 without a filler)
        and where training keeps them next to a BatchNorm; spread (γ in 1 ± GAMMA_SPREAD, β in
        ± BETA_SPREAD) so that a candidate skipping the layer would not pass ``verify``."""
        learned_scale = len(inputs) == 1  # blob 0 is s; with two bottoms only the bias
        return [rng.uniform(1 - GAMMA_SPREAD, 1 + GAMMA_SPREAD, blob.shape)
                if learned_scale and i == 0 else
                rng.uniform(-BETA_SPREAD, BETA_SPREAD, blob.shape)
                for i, blob in enumerate(blobs)]

    @staticmethod
    def numpy(ctx, node: Node, x, s, b=None):
        # Both modes line up the same way: s is bottom 1 (two bottoms) or blob 0 (one bottom),
        # and the bias blob, when bias_term, comes right after it.
        y = x * broadcast_operand(node, x, s)
        if b is not None:
            y = y + broadcast_operand(node, x, b)
        return (y,)

    @staticmethod
    def tensorrt(ctx, node: Node, x, s, b=None):
        # s is bottom 1 (an ITensor) or learned blob 0 (an array), as in numpy
        ops = ctx.trt.ElementWiseOperation
        scale = _aligned_operand(ctx, node, x, s, "scale")
        y = ctx.out(ctx.network.add_elementwise(x, scale, ops.PROD), "" if b is None else "scale")
        if b is None:
            return (y,)
        bias = _aligned_operand(ctx, node, x, b, "bias")
        return (ctx.out(ctx.network.add_elementwise(y, bias, ops.SUM)),)

    @staticmethod
    def onnx(ctx, node: Node, x, s, b=None):
        # y = x ⊙ s (+ b), s and b lined up with x's axes from axis (see _onnx_aligned)
        scale = _onnx_aligned(ctx, node, s, "scale")
        y = ctx.add("Mul", [x, scale], suffix="" if b is None else "scale")[0]
        if b is None:
            return (y,)
        return (ctx.add("Add", [y, _onnx_aligned(ctx, node, b, "bias")])[0],)


@register_op
class Bias(Op):
    """y = x + b, b broadcast over x from ``axis`` exactly like Scale's s (bias_param).

    With two bottoms, bottom 1 is b; otherwise b is learned blob 0 of shape
    x.shape[axis : axis+num_axes] (num_axes −1 = to the end, 0 = a scalar).
    """

    type = "Bias"
    param = "bias_param"
    n_bottoms = (1, 2)

    @staticmethod
    def parse(ctx, p):
        return {"axis": p.axis, "num_axes": p.num_axes}

    @staticmethod
    def infer(ctx, node: Node, x: Shape, b: Shape | None = None) -> tuple[Shape, ...]:
        aligned_axis(node, x, learned_operand_shape(node, x) if b is None else b, "bias")
        return (x,)

    @staticmethod
    def blobs(ctx, node: Node, x: Shape, b: Shape | None = None) -> tuple[tuple[str, Shape], ...]:
        return () if b is not None else (("bias", learned_operand_shape(node, x)),)

    @staticmethod
    def numpy(ctx, node: Node, x, b):
        return (x + broadcast_operand(node, x, b),)

    @staticmethod
    def tensorrt(ctx, node: Node, x, b):
        bias = _aligned_operand(ctx, node, x, b, "bias")
        return (ctx.out(ctx.network.add_elementwise(x, bias, ctx.trt.ElementWiseOperation.SUM)),)

    @staticmethod
    def onnx(ctx, node: Node, x, b):
        # y = x + b, b lined up with x's axes from axis like Scale's s
        return (ctx.add("Add", [x, _onnx_aligned(ctx, node, b, "bias")])[0],)


def learned_operand_shape(node: Node, x: Shape) -> Shape:
    """Scale/Bias one-bottom mode: the learned blob is x.shape[axis : axis+num_axes]."""
    axis = canonical_axis(node, node.attrs["axis"], len(x))
    num_axes = node.attrs["num_axes"]
    if num_axes < -1:
        raise shape_error(node, f"num_axes must be ≥ −1, found {num_axes}",
                          "use −1 for 'to the end' or 0 for a scalar")
    if num_axes == -1:
        return x[axis:]
    if axis + num_axes > len(x):
        raise shape_error(node, f"axis {axis} + num_axes {num_axes} exceeds the {len(x)} axes "
                          f"of bottom {x}", "lower num_axes")
    return x[axis:axis + num_axes]


def aligned_axis(node: Node, x: Shape, operand: Shape, what: str) -> int:
    """Where ``operand``'s axes start in x; its dims must equal x[axis : axis+rank(operand)].

    A scalar operand fits anywhere and Caffe then ignores ``axis`` (scale_layer.cpp Reshape).
    """
    if len(operand) == 0:
        return 0
    axis = canonical_axis(node, node.attrs["axis"], len(x))
    covered = x[axis:axis + len(operand)]
    if covered != tuple(operand):
        raise shape_error(
            node, f"{what} shape {tuple(operand)} must equal the bottom dims from axis {axis}, "
            f"found {covered} in bottom {x}", f"check the {what} blob or set axis")
    return axis


def broadcast_operand(node: Node, x: np.ndarray, operand: np.ndarray) -> np.ndarray:
    """``operand`` with trailing 1-axes so that numpy lines it up with x's axes from ``axis``."""
    axis = aligned_axis(node, x.shape, operand.shape, "operand")
    inner_axes = x.ndim - axis - operand.ndim
    return operand.reshape(operand.shape + (1,) * inner_axes)


@register_op
class Power(Op):
    """y = (shift + scale·x)^power (power_param)."""

    type = "Power"
    param = "power_param"

    @staticmethod
    def parse(ctx, p):
        return {"power": p.power, "scale": p.scale, "shift": p.shift}

    @staticmethod
    def infer(ctx, node: Node, x: Shape) -> tuple[Shape, ...]:
        return (x,)

    @staticmethod
    def numpy(ctx, node: Node, x):
        power, scale, shift = (np.float32(node.attrs[k]) for k in ("power", "scale", "shift"))
        return (np.power(shift + scale * x, power),)

    @staticmethod
    def tensorrt(ctx, node: Node, x):
        # y = (shift + scale·x)^power, skipping the steps that change nothing
        power, scale, shift = (node.attrs[k] for k in ("power", "scale", "shift"))
        ops, y = ctx.trt.ElementWiseOperation, x
        if scale != 1:
            y = _times(ctx, y, scale, "scale")
        if shift != 0:
            y = _with_scalar(ctx, y, shift, ops.SUM, "shift")
        if power == 2:  # a square as a product: exact, and defined for a negative base
            y = ctx.out(ctx.network.add_elementwise(y, y, ops.PROD), "power")
        elif power != 1:
            y = _with_scalar(ctx, y, power, ops.POW, "power")
        return (y,)  # x itself when nothing applies: the emitter keeps its name

    @staticmethod
    def onnx(ctx, node: Node, x):
        # y = (shift + scale·x)^power, skipping the steps that change nothing; the last node
        # made is renamed to the top by the exporter, x itself when nothing applies
        power, scale, shift = (node.attrs[k] for k in ("power", "scale", "shift"))
        y = x
        if scale != 1:
            y = ctx.add("Mul", [y, ctx.scalar(scale, "scale")], suffix="scale")[0]
        if shift != 0:
            y = ctx.add("Add", [y, ctx.scalar(shift, "shift")], suffix="shift")[0]
        if power == 2:  # a square as a product: exact, and defined for a negative base
            y = ctx.add("Mul", [y, y], suffix="power")[0]
        elif power != 1:
            y = ctx.add("Pow", [y, ctx.scalar(power, "power")], suffix="power")[0]
        return (y,)


# ---- ONNX helpers ----------------------------------------------------------------------------


def _onnx_aligned(ctx, node: Node, operand: str, what: str) -> str:
    """Scale's s (or a bias) made to broadcast against x from ``axis`` on.

    ONNX broadcasts numpy-style, lining the operand up with x's LAST axes, while Caffe lines
    it up from ``axis``: s of shape x.shape[axis : axis+k] needs k' = rank − axis − k trailing
    1-axes, s ↦ s.reshape(s.shape + (1,)*k'), one Unsqueeze (folded by runtimes for a learned
    blob). The operand's shape is bottom 1's, or else learned blob 0's (a bias blob has it too).
    """
    x_shape = node.inputs[0].shape
    shape = node.inputs[1].shape if len(node.inputs) > 1 else node.weights[0].shape
    # a scalar fits anywhere and Caffe then ignores axis (aligned_axis)
    axis = aligned_axis(node, x_shape, shape, what) if len(shape) else len(x_shape)
    inner = len(x_shape) - axis - len(shape)
    if inner <= 0 or not len(shape):
        return operand
    axes = list(range(len(shape), len(shape) + inner))
    return ctx.unsqueeze(operand, axes, f"{what}_aligned")


# ---- TensorRT helpers ------------------------------------------------------------------------


def _with_scalar(ctx, x, value: float, operation, suffix: str):
    """x (op) value, the scalar a constant of x's rank with all dims 1 (TensorRT broadcasts
    only between tensors of the same rank)."""
    scalar = ctx.constant(np.full((1,) * len(x.shape), value, np.float32), f"{suffix}_value")
    return ctx.out(ctx.network.add_elementwise(x, scalar, operation), suffix)


def _times(ctx, x, factor: float, suffix: str):
    return _with_scalar(ctx, x, factor, ctx.trt.ElementWiseOperation.PROD, suffix)


def _aligned_operand(ctx, node: Node, x, operand, what: str):
    """Scale's s (or a bias) shaped (1,)*axis + s.shape + (1,)*rest to broadcast against x.

    ``operand`` is a learned array (made a constant of that shape) or a tensor (unsqueezed).
    """
    rank, operand_rank = len(x.shape), len(operand.shape)
    # A scalar fits anywhere and Caffe then ignores axis (as aligned_axis does).
    axis = canonical_axis(node, node.attrs["axis"], rank) if operand_rank else 0
    inner = rank - axis - operand_rank
    if isinstance(operand, np.ndarray):
        return ctx.constant(operand.reshape((1,) * axis + operand.shape + (1,) * inner), what)
    axes = list(range(axis)) + list(range(axis + operand_rank, rank))
    if not axes:
        return operand
    return ctx.out(ctx.network.add_unsqueeze(operand, ctx.ints(axes, f"{what}_axes")),
                   f"{what}_broadcast")
