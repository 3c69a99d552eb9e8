"""Seeded synthetic weights for every learnable layer of a net (to try a pipeline early).

A blob whose layer gives a filler for it in the prototxt (``weight_filler``, ``bias_filler``,
or ``filler`` for Scale, Bias and PReLU) is filled as Caffe's ``include/caffe/filler.hpp``
fills it. Every other blob gets the op's own rule where it has one (BatchNorm's variances must
be > 0), else a default scaled by the blob's fan-in: uniform in ±1/√fan_in, fan_in =
count / shape[0] (a 1-D blob, a bias, takes the fan-in of its layer's first matrix). That keeps
a deep recurrence contracting: with ±0.5 whatever the width, a two-layer LSTM of 512 units is
chaotic after a hundred steps, and float32 rounding alone makes two correct programs disagree.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from caffe_lstm.errors import CaffeLstmError
from caffe_lstm.ir.graph import Graph, Node
from caffe_lstm.ops import get_op

#: The scale the ops' own rules (``Op.synthetic``) draw their free values with.
OP_RULE_SCALE = 0.5


@dataclass(frozen=True)
class Filler:
    """A FillerParameter, format-free: the fields of caffe.proto with their defaults."""

    type: str = "constant"
    value: float = 0.0
    min: float = 0.0
    max: float = 1.0
    mean: float = 0.0
    std: float = 1.0
    sparse: int = -1
    variance_norm: str = "FAN_IN"

    @classmethod
    def of(cls, params: Any) -> Filler:
        """From a Filler, or anything with the fields as keys or attributes (``Params``)."""
        if isinstance(params, Filler):
            return params
        get = params.get if isinstance(params, Mapping) else (
            lambda name, default: getattr(params, name, default))
        return cls(**{name: get(name, default) for name, default in _DEFAULTS.items()})


_DEFAULTS = {name: getattr(Filler, name) for name in Filler.__dataclass_fields__}

#: A layer's filler fields (``weight_filler``, ``bias_filler``, ``filler``...) -> the filler its
#: prototxt gives (a Filler, or anything ``Filler.of`` reads), None where it gives none.
LayerFillers = Mapping[str, Any]


def synthetic_weights(graph: Graph, seed: int, scale: float | None = None,
                      fillers: Mapping[str, LayerFillers] | None = None) -> list[
        tuple[str, str, list[np.ndarray]]]:
    """``(layer name, type, blobs)`` for every node with learnable blobs (loop bodies too).

    ``fillers``: layer name -> its filler fields (``frontend.fillers.layer_fillers``). ``scale``:
    blobs without a filler are uniform in [-scale, scale) instead of the fan-in default. One
    seeded generator is walked in node order, so the same net and seed give the same file.

    Raises:
        CaffeLstmError: a filler Caffe does not know, or one that cannot fill its blob.
    """
    rng = np.random.default_rng(seed)
    fillers = fillers or {}
    return [(node.name, node.op, _blobs(node, rng, scale, fillers.get(node.name, {})))
            for node in graph.all_nodes() if node.weights]


def _blobs(node: Node, rng: np.random.Generator, scale: float | None,
           given: LayerFillers) -> list[np.ndarray]:
    """The prototxt's fillers where given, else the op's own rule, else the default."""
    shapes = [tuple(v.shape) for v in node.weights]
    chosen = [_given_filler(given, i, shape) for i, shape in enumerate(shapes)]
    ruled = None
    if not all(chosen):
        ruled = get_op(node.op).synthetic(node, rng, OP_RULE_SCALE if scale is None else scale)
    blobs = []
    for i, (shape, filler) in enumerate(zip(shapes, chosen)):
        if filler is not None:
            blobs.append(fill(filler, shape, rng, node.label))
        elif ruled is not None:
            blobs.append(np.asarray(ruled[i], np.float32))
        else:
            bound = scale if scale is not None else _default_bound(shapes, shape)
            blobs.append(rng.uniform(-bound, bound, size=shape).astype(np.float32))
    return blobs


def _given_filler(given: LayerFillers, index: int, shape: tuple[int, ...]) -> Filler | None:
    """The filler the layer's param gives blob ``index``, as Caffe's layers pass them on: a
    param with a ``filler`` field (Scale, Bias, PReLU) fills its blobs in order (``filler``,
    then Scale's ``bias_filler``); otherwise ``weight_filler`` fills the matrices and
    ``bias_filler`` the 1-D blobs (an LSTM's W_xc, W_hc and b_c, an InnerProduct's W and b)."""
    if "filler" in given:
        field = "filler" if index == 0 else "bias_filler"
    else:
        field = "weight_filler" if len(shape) >= 2 else "bias_filler"
    params = given.get(field)
    return None if params is None else Filler.of(params)


def _default_bound(shapes: list[tuple[int, ...]], shape: tuple[int, ...]) -> float:
    """1/√fan_in of the blob, or of its layer's first matrix for a 1-D blob (1 if none)."""
    matrix = shape if len(shape) >= 2 else next((s for s in shapes if len(s) >= 2), None)
    return 1.0 / math.sqrt(_fan_in(matrix)) if matrix else 1.0


def _fan_in(shape: tuple[int, ...]) -> int:
    """Caffe's fan-in: count / num, num = shape[0]."""
    return max(1, math.prod(shape[1:]))


def _fan_out(shape: tuple[int, ...]) -> int:
    """Caffe's fan-out: count / channels, channels = shape[1] (1 for a 1-D blob)."""
    return max(1, math.prod(shape) // (shape[1] if len(shape) > 1 else 1))


def fill(filler: Filler, shape: tuple[int, ...], rng: np.random.Generator,
         where: str = "") -> np.ndarray:
    """A float32 blob of ``shape`` as Caffe's ``GetFiller(filler)->Fill`` makes one.

    Raises:
        CaffeLstmError: an unknown filler type, sparse on a filler other than gaussian, or a
            bilinear filler on a blob that is not a square 4-D kernel.
    """
    draw = _FILLERS.get(filler.type)
    if draw is None:
        raise CaffeLstmError(f"unknown filler type '{filler.type}'", where,
                             f"use one of {', '.join(sorted(_FILLERS))}, as Caffe does")
    if filler.sparse != -1 and filler.type != "gaussian":
        raise CaffeLstmError(f"the {filler.type} filler has sparse: {filler.sparse}", where,
                             "only the gaussian filler is sparse in Caffe")
    return np.asarray(draw(filler, shape, rng, where), np.float32)


def _constant(f: Filler, shape, rng, where):
    return np.full(shape, f.value)


def _uniform(f: Filler, shape, rng, where):
    return rng.uniform(f.min, f.max, shape)


def _gaussian(f: Filler, shape, rng, where):
    """N(mean, std²); with sparse ≥ 0 each value is kept with probability sparse / shape[0]
    (Caffe's mean number of non-zero inputs per output)."""
    values = rng.normal(f.mean, f.std, shape)
    if f.sparse < -1:
        raise CaffeLstmError(f"the gaussian filler has sparse: {f.sparse}", where,
                             "sparse is -1 (dense) or a mean number of inputs ≥ 0")
    if f.sparse >= 0:
        values *= rng.uniform(size=shape) < f.sparse / shape[0]
    return values


def _positive_unitball(f: Filler, shape, rng, where):
    """U(0, 1), each of the shape[0] rows divided by its sum."""
    values = rng.uniform(0, 1, shape).reshape(shape[0], -1)
    return (values / values.sum(axis=1, keepdims=True)).reshape(shape)


def _variance_fan(f: Filler, shape) -> float:
    """n of xavier and msra: fan_in, fan_out or their average (variance_norm)."""
    fan_in, fan_out = _fan_in(shape), _fan_out(shape)
    return {"FAN_IN": fan_in, "FAN_OUT": fan_out,
            "AVERAGE": (fan_in + fan_out) / 2}[f.variance_norm]


def _xavier(f: Filler, shape, rng, where):
    """U(-a, a), a = √(3 / n)."""
    bound = math.sqrt(3.0 / _variance_fan(f, shape))
    return rng.uniform(-bound, bound, shape)


def _msra(f: Filler, shape, rng, where):
    """N(0, σ²), σ = √(2 / n)."""
    return rng.normal(0.0, math.sqrt(2.0 / _variance_fan(f, shape)), shape)


def _bilinear(f: Filler, shape, rng, where):
    """The bilinear upsampling kernel for every (out, in) pair of a square 4-D blob:
    (1 − |x/k − c|)(1 − |y/k − c|), k = ⌈K/2⌉, c = (2k − 1 − k mod 2) / 2k."""
    if len(shape) != 4 or shape[2] != shape[3]:
        raise CaffeLstmError(f"the bilinear filler needs a square 4-D kernel, the blob is "
                             f"{shape}", where, "give this blob another filler")
    k = math.ceil(shape[3] / 2)
    c = (2 * k - 1 - k % 2) / (2.0 * k)
    taps = 1 - np.abs(np.arange(shape[3]) / k - c)
    return np.broadcast_to(np.outer(taps, taps), shape).copy()


_FILLERS = {"constant": _constant, "uniform": _uniform, "gaussian": _gaussian,
            "positive_unitball": _positive_unitball, "xavier": _xavier, "msra": _msra,
            "bilinear": _bilinear}
