"""The numpy executor: the reference backend, a walk over the nodes calling ``numpy`` facets.

An op holding a subgraph (a Loop) gets the executor as ``ctx`` and runs its body through
``ctx.run_subgraph`` once per step. Given ``progress``, the executor reports the net's layers
done and, while a loop of the net runs, its steps done (``<loop node>: steps``).

A loop body runs T times: its walk is planned once (``_BodyPlan``: each node's facet, weights
and argument slots resolved), so that a step costs its facets' numpy work plus a list lookup
per argument, not a walk's registry lookups, dicts and checks (benchmarks/cpu_runtimes.py:
the executor against a hand-written numpy loop).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from caffe_lstm.errors import CaffeLstmError, ExecutionError, ModelLoadError
from caffe_lstm.ir.graph import Graph, Node, Value, aligned
from caffe_lstm.ir.walk import GraphWalker, Progress
from caffe_lstm.ops import get_op
from caffe_lstm.ops.plugins import built_fault, checked_results, plugin_of, wrong_result


class NumpyExecutor(GraphWalker[np.ndarray]):
    """Runs a shaped graph with weights attached: the walker calling each node's ``numpy``
    facet; what travels along the edges are float32 arrays.

    Args:
        graph: the graph, after ``infer_shapes`` and with weight data attached.
        progress: told of the layers done, and of the steps done of a loop of the net.
    """

    facet = "numpy"

    def __init__(self, graph: Graph, progress: Progress | None = None) -> None:
        self.graph = graph
        self.progress = progress
        self._steps: tuple[str, int] = ("", 0)  # the net's loop running: (phase, steps)
        self._step = 0
        self._plans: dict[int, _BodyPlan] = {}  # by id of the body graph

    def run(
        self, feeds: Mapping[str, np.ndarray], intermediate: bool = False
    ) -> dict[str, np.ndarray]:
        """Executes the graph.

        Args:
            feeds: one array per net input, by name.
            intermediate: return every value instead of only the net outputs.

        Returns:
            Arrays by value name.
        """
        env = self.walk_values(self.graph, [self._feed(v, feeds) for v in self.graph.inputs])
        wanted = list(self.graph.values()) if intermediate else self.graph.outputs
        return {v.name: env[id(v)] for v in wanted if id(v) in env}

    def run_subgraph(self, graph: Graph, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Runs ``graph`` (a loop body: same weights, own inputs) on ``inputs`` in order;
        returns its outputs in order."""
        plan = self._plans.get(id(graph))
        if plan is None:
            plan = self._plans[id(graph)] = _BodyPlan.of(graph)
        self.depth += 1  # as a walk: a loop inside the body is not a loop of the net
        try:
            outputs = plan.run(self, inputs)
        finally:
            self.depth -= 1
        if self.progress is not None and self.depth == 1:  # a step of a loop of the net
            self._step += 1
            self.progress(self._steps[0], self._step, self._steps[1])
        return outputs

    @staticmethod
    def _feed(value: Value, feeds: Mapping[str, np.ndarray]) -> np.ndarray:
        if value.name not in feeds:
            raise ModelLoadError(
                f"no array for net input '{value.name}'",
                "the inputs",
                f"add '{value.name}' with shape {value.shape} to the .npz",
            )
        return np.asarray(feeds[value.name], dtype=np.float32)

    def visit(self, node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """The node's ``numpy`` facet on its bottoms then its blobs; one array per top."""
        args = inputs + [_weight(node, w) for w in node.weights]
        try:
            op = get_op(node.op)
            if self.progress is not None and self.depth == 1 and op.holds_subgraph:
                # a Loop walks its body once per step of its first (iterated) input
                self._steps, self._step = (f"{node.name}: steps", len(inputs[0])), 0
            results = op.numpy(self, node, *args)
        except Exception as exc:
            _reraise(node, exc)
        arrays = [np.asarray(array, dtype=np.float32)
                  for array in checked_results(node, "numpy", results, _is_array, "array")]
        if plugin_of(node.op) is not None:  # a plugin's numpy against its own infer
            _check_shapes(node, arrays)
        return arrays


def _reraise(node: Node, exc: Exception) -> None:
    """What a failing facet raises: a user error as an ``ExecutionError`` naming the node; a
    bug with its traceback kept, noted with the node that was running; a built-in facet's bug
    on a layer a plugin built, that plugin's error."""
    if (fault := built_fault(node, "numpy", exc)) is not None:
        raise fault from exc
    if isinstance(exc, CaffeLstmError):
        raise ExecutionError(f"while executing {node.name} ({node.op}): {exc.what}",
                             exc.where, exc.hint) from exc
    exc.add_note(f"while executing {node.name} ({node.op})")
    raise exc


@dataclass(frozen=True)
class _Call:
    """One node of a planned body: its facet, the slots of its bottoms, its (aligned) blobs,
    the slots its tops go to; ``checked``: a plugin's node, run through ``visit`` and its
    checks instead."""

    node: Node
    facet: Callable
    reads: tuple[int, ...]
    blobs: tuple[np.ndarray, ...]
    writes: tuple[int, ...]
    checked: bool


@dataclass(frozen=True)
class _BodyPlan:
    """A loop body's walk resolved once: values are slots of a list (the body's inputs first),
    each node a ``_Call``."""

    calls: tuple[_Call, ...]
    n_slots: int
    outputs: tuple[int, ...]

    @staticmethod
    def of(graph: Graph) -> _BodyPlan:
        slots = {id(value): k for k, value in enumerate(graph.inputs)}
        calls = []
        for node in graph.nodes:
            reads = tuple(slots[id(value)] for value in node.inputs)
            for value in node.outputs:
                slots[id(value)] = len(slots)
            calls.append(_Call(node, get_op(node.op).numpy, reads,
                               tuple(_weight(node, w) for w in node.weights),
                               tuple(slots[id(value)] for value in node.outputs),
                               plugin_of(node.op) is not None))
        return _BodyPlan(tuple(calls), len(slots), tuple(slots[id(v)] for v in graph.outputs))

    def run(self, executor: NumpyExecutor, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        values: list = [*inputs, *[None] * (self.n_slots - len(inputs))]
        for call in self.calls:
            bottoms = [values[k] for k in call.reads]
            if call.checked:
                results = executor.visit(call.node, bottoms)
            else:
                try:
                    results = call.facet(executor, call.node, *bottoms, *call.blobs)
                except Exception as exc:
                    _reraise(call.node, exc)
                if len(results) != len(call.writes):  # as the walk checks it
                    raise TypeError(f"{call.node.op} node {call.node.name}: numpy gave "
                                    f"{len(results)} result(s) for {len(call.writes)} top(s)")
            for k, array in zip(call.writes, results):
                values[k] = np.asarray(array, dtype=np.float32)
        return [values[k] for k in self.outputs]


def _is_array(item: object) -> bool:
    return isinstance(item, (np.ndarray, np.generic, int, float))


def _check_shapes(node: Node, arrays: list[np.ndarray]) -> None:
    for value, array in zip(node.outputs, arrays):
        if value.shape is not None and tuple(array.shape) != tuple(value.shape):
            raise wrong_result(node, "numpy", f"returned top '{value.name}' of shape "
                               f"{tuple(array.shape)} where its infer facet says {value.shape}")


def _weight(node: Node, value: Value) -> np.ndarray:
    if value.data is None:
        raise ModelLoadError(
            f"no weights for blob '{value.name}' {value.shape}",
            node.label,
            "pass the trained weights as weights=W.caffemodel",
        )
    return aligned(value.data)  # a view into the caffemodel may start at any byte offset
