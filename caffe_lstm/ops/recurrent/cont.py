"""The one reading of a recurrent layer's cont (the fork's clip): which bottom it is, and the
constant it always holds where only constants compute it.

Its questions: which net input gets 0-then-1 sequences in random feeds (``feeds.py``), whether
Caffe's carried state could leak into a call (``--state auto``, ``passes/expose_state.py``),
whether ONNX's own LSTM operator is exact (``native.py``), and, serving, which net inputs are a
cont and so batch-major on axis 1 or fed from Triton's START (``passes/batch_major.py``,
``serving/repository.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from caffe_lstm.ir.graph import Node, Value, aligned
from caffe_lstm.ops.registry import get_op, recurrent_spec


@dataclass(frozen=True, eq=False)
class ContReading:
    """A recurrent node's cont: its bottom ``index``, the ``value`` and, when only constants
    compute it, the array it always holds (``constant``), else None."""

    index: int
    value: Value
    constant: np.ndarray | None

    @property
    def is_input(self) -> bool:
        """Whether the cont is a net input (the caller decides its values)."""
        return self.value.producer is None


def read_cont(node: Node) -> ContReading | None:
    """The cont of recurrent ``node``, or None when it has none (not recurrent, or the fork's
    Lstm without a clip bottom)."""
    spec = recurrent_spec(node.op)
    if spec is None or spec.cont_bottom is None or spec.cont_bottom >= len(node.inputs):
        return None
    value = node.inputs[spec.cont_bottom]
    return ContReading(spec.cont_bottom, value, constant_value(value))


def constant_value(value: Value) -> np.ndarray | None:
    """The array ``value`` always holds when only constants compute it (layers without bottoms,
    or whose bottoms are such constants or are read for their shapes only, weights included;
    folded recursively with the numpy facets); None when it depends on a net input or on a
    layer that runs a subgraph."""
    producer = value.producer
    if producer is None:
        return None
    op = get_op(producer.op)
    if op is None or op.holds_subgraph:
        return None
    bottoms = [np.zeros(v.shape) if op.reads_shapes_only and v.shape is not None
               else constant_value(v) for v in producer.inputs]
    if any(b is None for b in bottoms) or any(w.data is None for w in producer.weights):
        return None
    results = op.numpy(None, producer, *bottoms, *[aligned(w.data) for w in producer.weights])
    return np.asarray(results[producer.outputs.index(value)], np.float64)
