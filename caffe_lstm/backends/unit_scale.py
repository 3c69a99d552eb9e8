"""Synthetic weights that keep the signal alive: every learnable layer's output at unit scale.

A prototxt's fillers are a training recipe, not a forward pass's: nineteen convolutions drawn
from ``gaussian std: 0.01`` shrink the signal a hundredfold per layer, and a net that outputs
1e-18 whatever its input checks nothing. As LSUV does (Mishkin & Matas, "All you need is a good
init", ICLR 2016), the net runs once in graph order on its own random inputs, and each learnable
layer, when reached, has its matrices (its blobs of two or more dims: a convolution's kernel,
an InnerProduct's or Embed's matrix; biases and per-channel blobs stay) multiplied by the
factor s that makes its output's standard deviation 1, and is run again with them: the layers
after it see the rescaled output. s = 1/std(y) is exact for a layer without bias (y is linear in
its matrices); where that call's output is still off, y(s) = s·A + B (the bias) is read off the
two calls and std(s·A + B) = 1 solved for s, a third call. One walk: the cost is one forward
plus one or two more calls per rescaled layer.

Rescaling cannot remove what does not depend on the input. Drawn at random, a BatchNorm's
statistics and a Scale's γ and β add a different constant to every channel of every block;
and a convolution reading a ReLU's (positive) output shifts each of its channels by the mean
input times its kernel's sum. After some sixty such layers an Inception net maps every clip to
about the same features (its pooled features moved 0.05 % between two inputs). So a layer
whose op has a ``calibrate`` rule gets, when the walk reaches it, the blobs that rule makes
from its actual input instead, as a trained net has them, and is not rescaled again:
BatchNorm's statistics are its input's own, so it normalises; Scale's γ is near 1 and β near
0; Convolution, Deconvolution and InnerProduct come out at unit scale in one step from their
drawn output, their per-channel offsets taken out through the bias where they dominate
(ops/unit_output.py). The cost stays one forward plus at most two more calls per layer.

Recurrent layers keep the weights they were drawn with (their fillers, or the fan-in default
that keeps the recurrence contracting: a unit-scale recurrence can be chaotic), and so do the
layers inside a loop body.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from caffe_lstm.backends.numpy_exec import NumpyExecutor
from caffe_lstm.errors import CaffeLstmError
from caffe_lstm.ir.graph import Graph, Node, Value, clone_graph
from caffe_lstm.ops import get_op, recurrent_spec
from caffe_lstm.ops.unit_output import NO_SPREAD, unit_factor

#: Blobs of a layer, as ``synthetic_weights`` gives them: (layer name, type, arrays).
LayerBlobs = tuple[str, str, list[np.ndarray]]

#: The output's std is 1 within this: a layer already there is not run again.
TOLERANCE = 0.02
#: Mixed into the seed of the calibration rules' generator (apart from the weights' draw).
_CALIBRATION_STREAM = 23


def unit_scaled(graph: Graph, layers: Sequence[LayerBlobs],
                feeds: Mapping[str, np.ndarray], seed: int = 0) -> list[LayerBlobs]:
    """``layers`` with each learnable layer's matrices rescaled so that its output has unit
    standard deviation on ``feeds``, and the layers whose op calibrates given their
    calibrated blobs (graph order; see the module's docstring). ``seed``: of the values the
    ops' ``calibrate`` rules draw.

    A copy of ``graph`` (shaped) gets the blobs of ``layers`` by layer name, runs once, and
    gives them back in the same order.

    Raises:
        CaffeLstmError: the net cannot run on the numpy executor.
    """
    graph = clone_graph(graph)  # its weight values are replaced
    nodes = {node.name: node for node in graph.all_nodes()}
    for name, _, blobs in layers:
        for value, blob in zip(nodes[name].weights, blobs):
            value.data = np.asarray(blob, np.float32)
    try:
        _UnitScaling(graph, seed).run(feeds)
    except CaffeLstmError as exc:
        raise type(exc)(f"the net cannot run to scale its synthetic weights: {exc.what}",
                        exc.where, "keep the drawn weights as they are with fillers=True"
                        ) from exc
    return [(name, kind, [value.data for value in nodes[name].weights])
            for name, kind, _ in layers]


class _UnitScaling(NumpyExecutor):
    """The numpy executor rescaling each top-level learnable layer as the walk reaches it."""

    def __init__(self, graph: Graph, seed: int) -> None:
        super().__init__(graph)
        self._top_level = {id(node) for node in graph.nodes}
        self._rescaled: set[int] = set()  # weights shared by several layers: rescaled once
        # a stream of its own: the drawn weights came from default_rng(seed)
        self._rng = np.random.default_rng((seed, _CALIBRATION_STREAM))

    def visit(self, node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
        if self._calibrate(node, inputs):
            return super().visit(node, inputs)
        results = super().visit(node, inputs)
        matrices = self._matrices(node) if results else []  # Silence has no top
        self._rescaled.update(id(value) for value in matrices)
        spread = _spread(results[0]) if matrices else None
        if spread is None or abs(spread - 1) <= TOLERANCE:
            return results
        drawn = [value.data for value in matrices]
        # a layer linear in its matrices with no bias: y(s) = s·y(1), one rerun is exact
        first, factor = results[0], 1 / spread
        results = self._run_scaled(node, inputs, matrices, drawn, factor)
        spread = _spread(results[0])
        if spread is None or abs(spread - 1) <= TOLERANCE:
            return results
        # with a bias, y(s) = s·A + B: A and B from the two runs, then std(s·A + B) = 1
        slope = (results[0].astype(np.float64) - first) / (factor - 1)
        solved = unit_factor(slope, first - slope)
        return (results if solved is None
                else self._run_scaled(node, inputs, matrices, drawn, solved))

    def _calibrate(self, node: Node, inputs: list[np.ndarray]) -> bool:
        """Gives ``node`` the blobs its op's ``calibrate`` rule makes from its inputs (then it
        is not rescaled); False where the rule has none for it."""
        if (id(node) not in self._top_level or not node.weights
                or any(id(value) in self._rescaled for value in node.weights)):
            return False
        blobs = get_op(node.op).calibrate(node, self._rng, inputs,
                                          [value.data for value in node.weights])
        if blobs is None:
            return False
        for value, blob in zip(node.weights, blobs):
            value.data = np.asarray(blob, np.float32)
        self._rescaled.update(id(value) for value in node.weights)
        return True

    def _run_scaled(self, node: Node, inputs: list[np.ndarray], matrices: list[Value],
                    drawn: list[np.ndarray], factor: float) -> list[np.ndarray]:
        """The node run with its matrices set to the drawn ones times ``factor``."""
        for value, array in zip(matrices, drawn):
            value.data = (array * factor).astype(np.float32)
        return super().visit(node, inputs)

    def _matrices(self, node: Node) -> list[Value]:
        """The blobs to rescale: none for a loop body's or a recurrent layer's node, nor those
        an earlier layer sharing them rescaled."""
        if (id(node) not in self._top_level or node.subgraphs
                or recurrent_spec(node.op) is not None):
            return []
        return [value for value in node.weights if value.data is not None
                and value.data.ndim >= 2 and id(value) not in self._rescaled]


def _spread(output: np.ndarray) -> float | None:
    """The output's standard deviation; None where there is nothing to rescale."""
    spread = float(np.std(output, dtype=np.float64))
    return spread if np.isfinite(spread) and spread >= NO_SPREAD else None
