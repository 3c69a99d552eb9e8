"""Evaluators of the TensorRT layer types, one small function per LayerType.

Each reads the layer's parameters through its own TensorRT interface and returns its outputs;
``run`` is the loop iteration (``_LoopRun``) for the loop boundary layers, else unused.
"""

from __future__ import annotations

import math
from functools import reduce
from typing import Any
from collections.abc import Sequence

import numpy as np

from caffe_lstm.backends.tensorrt.network_eval.common import (NetworkEvalError, NotModeledError,
                                                              axes_of, evaluates, numpy_dtype,
                                                              wide)

# --------------------------------------------------------------------------------------------
# Helpers for the layer evaluators


def _param(layer: Any, inputs: list, slot: int, attribute: str) -> Any:
    """A parameter given as dynamic input `slot` when set, else the static attribute (which is
    not read when the input is set: TensorRT warns on that)."""
    if slot < len(inputs) and inputs[slot] is not None:
        return inputs[slot]
    return getattr(layer, attribute)


def _ints(values: Any) -> list[int] | None:
    """A Dims, a tuple or a 1-D shape tensor as Python ints (None stays None)."""
    if values is None:
        return None
    array = values if isinstance(values, np.ndarray) else np.asarray(list(values))
    return [int(v) for v in array.reshape(-1)]


def _scalar_int(array: np.ndarray, what: str) -> int:
    if array.ndim != 0 or not np.issubdtype(array.dtype, np.integer):
        raise NetworkEvalError(f"{what} must be a 0-D integer tensor, got {array.dtype} "
                               f"{array.shape}")
    return int(array)


def _same_rank(*arrays: np.ndarray) -> None:
    """TensorRT broadcasts size-1 dims only between tensors of equal rank."""
    shapes = [a.shape for a in arrays]
    if len({len(s) for s in shapes}) != 1 or any(
            len({n for n in dims if n != 1}) > 1 for dims in zip(*shapes)):
        raise NetworkEvalError(f"shapes {shapes} do not broadcast (equal ranks, dims equal or 1)")


def _normalize_axes(axes: Sequence[int], rank: int) -> tuple[int, ...]:
    return tuple(a + rank if a < 0 else a for a in axes)


# --------------------------------------------------------------------------------------------
# Layer evaluators, one per LayerType


@evaluates("CONSTANT", "IConstantLayer")
def _constant(layer, inputs, run):
    """The weights (a flat array of their own dtype) with the layer's dims."""
    return [np.array(layer.weights, copy=True).reshape(tuple(layer.shape))]


@evaluates("IDENTITY", "IIdentityLayer")
def _identity(layer, inputs, run):
    return [inputs[0].copy()]


@evaluates("CAST", "ICastLayer")
def _cast(layer, inputs, run):
    """x as `to_type` (numpy conversion: float -> int truncates toward zero)."""
    return [inputs[0].astype(numpy_dtype(layer.to_type))]


@evaluates("SHAPE", "IShapeLayer")
def _shape(layer, inputs, run):
    """The dims of x as an INT64 vector."""
    return [np.array(inputs[0].shape, dtype=np.int64)]


@evaluates("MATRIX_MULTIPLY", "IMatrixMultiplyLayer")
def _matrix_multiply(layer, inputs, run):
    """op(A)·op(B) on the last two dims, batch dims broadcast (size 1); TRANSPOSE swaps the last
    two dims; VECTOR takes the last dim as a vector (A: row, B: column), dropped from the result."""
    a, b = inputs
    op0, op1 = layer.op0.name, layer.op1.name
    batch_a = a.shape[:-1] if op0 == "VECTOR" else a.shape[:-2]
    batch_b = b.shape[:-1] if op1 == "VECTOR" else b.shape[:-2]
    if len(batch_a) != len(batch_b):
        raise NetworkEvalError(f"matmul batch ranks differ: {a.shape} ({op0}), {b.shape} ({op1})")
    a = wide(a)[..., None, :] if op0 == "VECTOR" else wide(a)
    b = wide(b)[..., :, None] if op1 == "VECTOR" else wide(b)
    a = np.swapaxes(a, -1, -2) if op0 == "TRANSPOSE" else a
    b = np.swapaxes(b, -1, -2) if op1 == "TRANSPOSE" else b
    y = np.matmul(a, b)
    y = y[..., 0, :] if op0 == "VECTOR" else y
    y = y[..., 0] if op1 == "VECTOR" else y
    return [y.astype(inputs[0].dtype)]


def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a / b; integer division truncates toward zero (C semantics), not floor."""
    if np.issubdtype(a.dtype, np.integer):
        return np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))
    return a / b


_ELEMENTWISE = {
    "SUM": np.add, "PROD": np.multiply, "SUB": np.subtract, "DIV": _divide, "POW": np.power,
    "MAX": np.maximum, "MIN": np.minimum, "FLOOR_DIV": np.floor_divide,
    "AND": np.logical_and, "OR": np.logical_or, "XOR": np.logical_xor,
    "EQUAL": np.equal, "GREATER": np.greater, "LESS": np.less,
}


@evaluates("ELEMENTWISE", "IElementWiseLayer")
def _elementwise(layer, inputs, run):
    """a ∘ b with size-1 dims broadcast; comparisons and logic give BOOL."""
    a, b = inputs
    _same_rank(a, b)
    if a.dtype != b.dtype:
        raise NetworkEvalError(f"elementwise inputs differ in dtype: {a.dtype}, {b.dtype}")
    op = layer.op.name
    if op not in _ELEMENTWISE:
        raise NotModeledError(f"elementwise operation {op}")
    y = np.asarray(_ELEMENTWISE[op](wide(a), wide(b)))
    return [y if y.dtype == np.bool_ else y.astype(a.dtype)]


_erf = np.vectorize(math.erf, otypes=[np.float64])

#: ActivationType name -> f(x, alpha, beta), the formulas of NvInfer.h.
_ACTIVATIONS = {
    "RELU": lambda x, a, b: np.maximum(x, 0),
    "SIGMOID": lambda x, a, b: np.exp(-np.logaddexp(0, -x)),          # 1 / (1 + e^-x)
    "TANH": lambda x, a, b: np.tanh(x),
    "LEAKY_RELU": lambda x, a, b: np.where(x >= 0, x, a * x),
    "ELU": lambda x, a, b: np.where(x >= 0, x, a * np.expm1(x)),
    "SELU": lambda x, a, b: b * np.where(x > 0, x, a * np.expm1(x)),
    "SOFTSIGN": lambda x, a, b: x / (1 + np.abs(x)),
    "SOFTPLUS": lambda x, a, b: a * np.logaddexp(0, b * x),            # α·log(e^(βx) + 1)
    "CLIP": lambda x, a, b: np.maximum(a, np.minimum(x, b)),         # max(α, min(x, β))
    "HARD_SIGMOID": lambda x, a, b: np.clip(a * x + b, 0, 1),
    "SCALED_TANH": lambda x, a, b: a * np.tanh(b * x),
    "THRESHOLDED_RELU": lambda x, a, b: np.where(x > a, x, 0),
    "GELU_ERF": lambda x, a, b: 0.5 * x * (1 + _erf(x / math.sqrt(2))),
    "GELU_TANH": lambda x, a, b: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi)
                                                        * (x + 0.044715 * x**3))),
}


@evaluates("ACTIVATION", "IActivationLayer")
def _activation(layer, inputs, run):
    """f(x) with the layer's alpha and beta."""
    kind = layer.type.name           # IActivationLayer.type is the ActivationType
    if kind not in _ACTIVATIONS:
        raise NotModeledError(f"activation {kind}")
    x = inputs[0]
    return [np.asarray(_ACTIVATIONS[kind](wide(x), layer.alpha, layer.beta)).astype(x.dtype)]


_UNARY = {
    "EXP": np.exp, "LOG": np.log, "SQRT": np.sqrt, "RECIP": np.reciprocal, "ABS": np.abs,
    "NEG": np.negative, "SIN": np.sin, "COS": np.cos, "TAN": np.tan, "SINH": np.sinh,
    "COSH": np.cosh, "ASIN": np.arcsin, "ACOS": np.arccos, "ATAN": np.arctan,
    "ASINH": np.arcsinh, "ACOSH": np.arccosh, "ATANH": np.arctanh, "CEIL": np.ceil,
    "FLOOR": np.floor, "ERF": _erf, "NOT": np.logical_not, "SIGN": np.sign,
    "ROUND": np.round,                      # half to even, like TensorRT's kROUND
    "ISINF": np.isinf, "ISNAN": np.isnan,
}


@evaluates("UNARY", "IUnaryLayer")
def _unary(layer, inputs, run):
    op, x = layer.op.name, inputs[0]
    if op not in _UNARY:
        raise NotModeledError(f"unary operation {op}")
    y = np.asarray(_UNARY[op](wide(x)))
    return [y if y.dtype == np.bool_ else y.astype(x.dtype)]


@evaluates("PARAMETRIC_RELU", "IParametricReLULayer")
def _parametric_relu(layer, inputs, run):
    """x >= 0 ? x : slope·x, slopes broadcast."""
    x, slope = inputs
    _same_rank(x, slope)
    return [np.where(x >= 0, x, wide(slope) * wide(x)).astype(x.dtype)]


@evaluates("SELECT", "ISelectLayer")
def _select(layer, inputs, run):
    """condition ? a : b, size-1 dims broadcast."""
    condition, a, b = inputs
    _same_rank(condition, a, b)
    return [np.where(condition, a, b)]


@evaluates("SLICE", "ISliceLayer")
def _slice(layer, inputs, run):
    """y[o] = x[start + o·stride] per axis, `shape` outputs per axis; coordinates outside x follow
    the sample mode. start/shape/stride/fill value/axes come from inputs 1..5 when set."""
    x = inputs[0]
    start = _ints(_param(layer, inputs, 1, "start"))
    size = _ints(_param(layer, inputs, 2, "shape"))
    stride = _ints(_param(layer, inputs, 3, "stride"))
    axes = _ints(_param(layer, inputs, 5, "axes"))
    if axes is not None:     # start/shape/stride for `axes` only; other axes are taken whole
        axes = _normalize_axes(axes, x.ndim)
        start, size, stride = ([dict(zip(axes, p)).get(d, default) for d in range(x.ndim)]
                               for p, default in ((start, 0), (size, None), (stride, 1)))
        size = [x.shape[d] if n is None else n for d, n in enumerate(size)]
    index = [s + np.arange(n) * st for s, n, st in zip(start, size, stride, strict=True)]
    fill = inputs[4] if len(inputs) > 4 and inputs[4] is not None else np.zeros((), x.dtype)
    return [_sample(x, index, layer.mode.name, fill)]


def _sample(x: np.ndarray, index: list[np.ndarray], mode: str, fill: np.ndarray) -> np.ndarray:
    """x at the outer product of the per-axis coordinates `index`, per the sample mode."""
    inside = [(i >= 0) & (i < n) for i, n in zip(index, x.shape)]
    if mode == "STRICT_BOUNDS":
        if not all(ok.all() for ok in inside):
            raise NetworkEvalError(f"slice coordinates {[i.tolist() for i in index]} leave "
                                   f"{x.shape} (STRICT_BOUNDS)")
        return x[_open_grid(index)]
    if mode == "WRAP":
        return x[_open_grid([i % n for i, n in zip(index, x.shape)])]
    clamped = [np.clip(i, 0, n - 1) for i, n in zip(index, x.shape)]
    if mode == "CLAMP":
        return x[_open_grid(clamped)]
    if mode == "FILL":
        mask = reduce(np.logical_and, _open_grid(inside), np.ones((), bool))
        return np.where(mask, x[_open_grid(clamped)], fill).astype(x.dtype)
    raise NotModeledError(f"slice sample mode {mode}")


def _open_grid(per_axis: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    """Like np.ix_, but boolean arrays stay values (np.ix_ turns them into indices)."""
    rank = len(per_axis)
    return tuple(a.reshape([-1 if k == d else 1 for k in range(rank)])
                 for d, a in enumerate(per_axis))


@evaluates("SHUFFLE", "IShuffleLayer")
def _shuffle(layer, inputs, run):
    """transpose(first) → reshape (0 copies the input dim when zero_is_placeholder, -1 is
    inferred; dims from input 1 when set) → transpose(second). The result may be a view: no
    evaluator writes into its inputs, and copying a transposed vocabulary-sized weight costs
    seconds."""
    x = inputs[0]
    x = np.transpose(x, tuple(layer.first_transpose)[:x.ndim])   # the permutation has 8 slots
    dims = _ints(_param(layer, inputs, 1, "reshape_dims"))
    if dims is not None:
        if layer.zero_is_placeholder:
            dims = [x.shape[k] if d == 0 else d for k, d in enumerate(dims)]
        x = x.reshape(dims)
    return [np.transpose(x, tuple(layer.second_transpose)[:x.ndim])]


@evaluates("CONCATENATION", "IConcatenationLayer")
def _concatenation(layer, inputs, run):
    if len({x.dtype for x in inputs}) != 1:
        raise NetworkEvalError(f"concatenation of dtypes {[x.dtype for x in inputs]}")
    return [np.concatenate(inputs, axis=layer.axis)]


@evaluates("GATHER", "IGatherLayer")
def _gather(layer, inputs, run):
    """DEFAULT: data indexed on `axis` by every index (y rank = data rank - 1 + index rank);
    ELEMENT: y[..i..] = data[..index[..i..]..] on `axis`."""
    data, index = inputs
    mode, axis = layer.mode.name, layer.axis
    if np.any(index < 0) or np.any(index >= data.shape[axis]):
        raise NetworkEvalError(f"gather indices {index.tolist()} outside axis {axis} of "
                               f"{data.shape}")
    if mode == "DEFAULT" and layer.num_elementwise_dims == 0:
        return [np.take(data, index, axis=axis)]
    if mode == "ELEMENT":
        _same_rank(data, index)
        return [np.take_along_axis(data, index, axis=axis)]
    raise NotModeledError(f"gather mode {mode} with {layer.num_elementwise_dims} "
                              "elementwise dims")


@evaluates("SQUEEZE", "ISqueezeLayer")
def _squeeze(layer, inputs, run):
    """x without the size-1 dims listed in input 1."""
    x = inputs[0]
    return [np.squeeze(x, axis=_normalize_axes(_ints(inputs[1]), x.ndim))]


@evaluates("UNSQUEEZE", "IUnsqueezeLayer")
def _unsqueeze(layer, inputs, run):
    """x with size-1 dims inserted at the output axes listed in input 1."""
    x, axes = inputs[0], _ints(inputs[1])
    return [np.expand_dims(x, _normalize_axes(axes, x.ndim + len(axes)))]


@evaluates("SOFTMAX", "ISoftMaxLayer")
def _softmax(layer, inputs, run):
    """e^x / Σ e^x over the one axis set in the `axes` bitmask."""
    x = inputs[0]
    axes = axes_of(layer.axes, x.ndim)
    if len(axes) != 1:
        raise NetworkEvalError(f"softmax axes bitmask {layer.axes:#b} selects {len(axes)} axes")
    e = np.exp(wide(x) - wide(x).max(axis=axes[0], keepdims=True))
    return [(e / e.sum(axis=axes[0], keepdims=True)).astype(x.dtype)]


_REDUCTIONS = {"SUM": np.sum, "PROD": np.prod, "MAX": np.max, "MIN": np.min, "AVG": np.mean}


@evaluates("REDUCE", "IReduceLayer")
def _reduce(layer, inputs, run):
    """op over the axes of the bitmask, keeping them as size 1 with keep_dims."""
    x, op = inputs[0], layer.op.name
    if op not in _REDUCTIONS:
        raise NotModeledError(f"reduce operation {op}")
    y = _REDUCTIONS[op](wide(x), axis=axes_of(layer.axes, x.ndim), keepdims=layer.keep_dims)
    return [np.asarray(y).astype(x.dtype)]


@evaluates("FILL", "IFillLayer")
def _fill(layer, inputs, run):
    """LINSPACE: y[i0, .., ik] = alpha + Σ_d delta[d]·i_d; shape, alpha and delta from inputs
    0, 1, 2 when set, else the static `shape`, `alpha`, `beta`."""
    if layer.operation.name != "LINSPACE":
        raise NotModeledError(f"fill operation {layer.operation.name} (random)")
    dims = tuple(_ints(_param(layer, inputs, 0, "shape")))
    alpha = np.asarray(_param(layer, inputs, 1, "alpha"), np.float64)
    delta = np.asarray(_param(layer, inputs, 2, "beta"), np.float64).reshape(-1)
    if delta.size == 1 and len(dims) > 1 and not (len(inputs) > 2 and inputs[2] is not None):
        # NvInfer.h defines the delta per dimension only for the dynamic input
        raise NotModeledError(f"static LINSPACE of rank {len(dims)} (use input 2 for delta)")
    delta = np.broadcast_to(delta, (len(dims),))
    y = alpha + sum(d * np.arange(n).reshape([-1 if k == axis else 1 for k in range(len(dims))])
                    for axis, (d, n) in enumerate(zip(delta, dims)))
    return [np.broadcast_to(y, dims).astype(numpy_dtype(layer.to_type))]


@evaluates("REVERSE_SEQUENCE", "IReverseSequenceLayer")
def _reverse_sequence(layer, inputs, run):
    """Per batch entry b, the first lengths[b] steps of the sequence axis reversed."""
    x, lengths = inputs
    seq, batch = layer.sequence_axis, layer.batch_axis
    t = np.arange(x.shape[seq])[:, None]
    source = np.where(t < lengths[None, :], lengths[None, :] - 1 - t, t)     # [T, B]
    shape = [1] * x.ndim
    shape[seq], shape[batch] = x.shape[seq], x.shape[batch]
    source = (source if seq < batch else source.T).reshape(shape)
    return [np.take_along_axis(x, np.broadcast_to(source, x.shape), axis=seq)]




# Loop boundary layers: `run` is the _LoopRun of their loop.


@evaluates("TRIP_LIMIT", "ITripLimitLayer")
def _trip_limit(layer, inputs, run):
    """COUNT: the loop runs input-0 times (a 0-D integer from outside the loop). No output."""
    run.trips = _scalar_int(inputs[0], "the COUNT trip limit")
    return []


@evaluates("ITERATOR", "IIteratorLayer")
def _iterator(layer, inputs, run):
    """Iteration i gives x[i] on `axis` (x[M-1-i] when reverse, M = the trip count)."""
    x, axis = inputs[0], layer.axis
    index = run.trips - 1 - run.step if layer.reverse else run.step
    if not 0 <= index < x.shape[axis]:
        raise NetworkEvalError(f"iteration reads index {index} of axis {axis} of {x.shape}")
    return [np.take(x, index, axis=axis)]


@evaluates("RECURRENCE", "IRecurrenceLayer")
def _recurrence(layer, inputs, run):
    """Input 0 (the initial value) at iteration 0, then input 1 of the previous iteration."""
    if run.step == 0:
        return [inputs[0]]
    return [run.carried[layer.get_output(0).name]]


@evaluates("LOOP_OUTPUT", "ILoopOutputLayer")
def _loop_output(layer, inputs, run):
    """LAST_VALUE: the recurrence's state after the last iteration. CONCATENATE: the
    per-iteration values stacked on a new axis `axis` of length input 1; REVERSE: the same,
    last iteration first. Rows past the last iteration (undefined in TensorRT) are zeros."""
    if layer.kind.name == "LAST_VALUE":
        return [inputs[0]]
    rows, length = inputs[0], _scalar_int(inputs[1], "the loop output length")
    if len(rows) > length:
        raise NetworkEvalError(f"{len(rows)} iterations but an output length of {length}")
    if len(rows) < length:
        row = rows[0] if rows else _static_row(layer)
        rows = rows + [np.zeros_like(row)] * (length - len(rows))
    if layer.kind.name == "REVERSE":
        rows = rows[::-1]
    return [np.stack(rows, axis=layer.axis)]


def _static_row(layer: Any) -> np.ndarray:
    """A zero row for a loop that ran no iteration, from TensorRT's static output dims."""
    dims, axis = list(layer.get_output(0).shape), layer.axis
    del dims[axis]
    if any(d < 0 for d in dims):
        raise NetworkEvalError("a loop that ran no iteration has an output of dynamic dims")
    return np.zeros(dims, numpy_dtype(layer.get_output(0).dtype))
