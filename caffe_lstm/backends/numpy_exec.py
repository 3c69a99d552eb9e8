"""The numpy executor: the reference backend, a walk over the nodes calling ``numpy`` facets.

An op holding a subgraph (a Loop) gets the executor as ``ctx`` and runs its body through
``ctx.run_subgraph`` once per step. Given ``progress``, the executor reports the net's layers
done and, while a loop of the net runs, its steps done (``<loop node>: steps``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from caffe_lstm.errors import CaffeLstmError, ExecutionError, ModelLoadError
from caffe_lstm.ir.graph import Graph, Node, Value, aligned
from caffe_lstm.ir.walk import GraphWalker, Progress
from caffe_lstm.ops import get_op
from caffe_lstm.ops.plugins import checked_results, plugin_of, wrong_result


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
        outputs = self.walk(graph, inputs)
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
        except CaffeLstmError as exc:
            raise ExecutionError(f"while executing {node.name} ({node.op}): {exc.what}",
                                 exc.where, exc.hint) from exc
        except Exception as exc:
            # A bug, not a user error: keep the traceback, but say which node was running.
            exc.add_note(f"while executing {node.name} ({node.op})")
            raise
        arrays = [np.asarray(array, dtype=np.float32)
                  for array in checked_results(node, "numpy", results, _is_array, "array")]
        if plugin_of(node.op) is not None:  # a plugin's numpy against its own infer
            _check_shapes(node, arrays)
        return arrays


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
