"""Where a failing column first diverges: every intermediate value of the candidate against
the reference, in the rewritten graph's order (Polygraphy's "mark all outputs" search).

The references: the equations (numpy, the net as loaded) for every blob the Caffe net has;
the rewritten graph run with numpy for the values only the rewrite has (a loop body's gates,
step by step). For the numpy column itself only the first kind exists: a divergence inside a
loop is then named by its recurrent layer and the first time step its output differs. So is
every divergence inside a loop when keeping each step's values would take more than
``STEP_VALUE_BYTES`` (T steps of every body value, for the candidate and the reference): the
size is computed from the shapes before anything runs.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from caffe_lstm.analysis.limits import format_size
from caffe_lstm.backends.numpy_exec import NumpyExecutor
from caffe_lstm.compare import Comparison, Tolerance, compare_arrays
from caffe_lstm.ir.graph import Graph, Node
from caffe_lstm.verification.columns import Request
from caffe_lstm.verification.prepared import Prepared
from caffe_lstm.verification.report import Column, Located


#: The most bytes of loop body values, all steps of both traces, that a search keeps (on a long
#: sequence: T · N · H floats for each of a step's ~15 values).
STEP_VALUE_BYTES = 2 << 30


def step_value_bytes(graph: Graph) -> int:
    """The bytes of float32 values that the loop bodies of ``graph`` compute over all their
    steps (a loop inside a body counted once per step of the outer loop)."""
    total = 0
    for node in graph.nodes:
        steps = node.inputs[0].shape[0] if node.subgraphs and node.inputs and \
            node.inputs[0].shape else 0
        for body in node.subgraphs:
            values = sum(4 * math.prod(value.shape) for inner in body.nodes
                         for value in inner.outputs if value.shape is not None)
            total += steps * (values + step_value_bytes(body))
    return total


@dataclass
class Trace:
    """One run's intermediates: the main graph's ``values`` by name, and each loop body
    value's arrays step by step (``steps``)."""

    values: dict[str, np.ndarray] = field(default_factory=dict)
    steps: dict[str, list[np.ndarray]] = field(default_factory=lambda: defaultdict(list))


class _TracingExecutor(NumpyExecutor):
    """The numpy executor, keeping every loop body value of every step."""

    def __init__(self, graph: Graph) -> None:
        super().__init__(graph)
        self.trace = Trace()

    def run_subgraph(self, graph: Graph, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        env = self.walk_values(graph, inputs)
        for node in graph.nodes:
            for value in node.outputs:
                self.trace.steps[value.name].append(env[id(value)])
        return [env[id(value)] for value in graph.outputs]


def trace_numpy(graph: Graph, feeds: Mapping[str, np.ndarray], steps: bool = True) -> Trace:
    """The rewritten graph's values in numpy; ``steps``: each loop body value of each step
    too."""
    executor = _TracingExecutor(graph) if steps else NumpyExecutor(graph)
    values = executor.run(feeds, intermediate=True)
    trace = executor.trace if steps else Trace()
    trace.values = values
    return trace


def trace_tensorrt(prepared: Prepared, request: Request, steps: bool = True) -> Trace:
    """The TensorRT network walk's tensors (float16 ones as float32); ``steps``: each loop
    step's too."""
    from caffe_lstm.backends.tensorrt.cpu_walk import evaluate_emitted
    from caffe_lstm.backends.tensorrt.runtime import load_runtime

    trace = Trace()

    def observe(step: int | None, tensors: Mapping[str, np.ndarray]) -> None:
        for name, array in tensors.items():
            if step is None:
                trace.values[name] = np.asarray(array, np.float32)
            elif steps:
                trace.steps[name].append(np.asarray(array, np.float32))

    evaluate_emitted(load_runtime(request.runtime), prepared.rewritten, prepared.feeds,
                     request.fp16, observe)
    return trace


def trace_onnx(prepared: Prepared, request: Request, steps: bool = True) -> Trace:
    """The ONNX model's values with every one an output, loop bodies' stacked per step (with
    ``steps``)."""
    from caffe_lstm.backends.onnx.exporter import build_model
    from caffe_lstm.backends.onnx.intermediates import with_every_value_as_output
    from caffe_lstm.backends.onnx.runtime import run_model
    from caffe_lstm.options import DEFAULT_OPSET

    body_values = {value.name for node in prepared.rewritten.nodes for body in node.subgraphs
                   for inner in body.nodes for value in inner.outputs} if steps else set()
    model, _ = build_model(prepared.rewritten, DEFAULT_OPSET, {})
    marked, stacked = with_every_value_as_output(model, body_values)
    results = run_model(marked, prepared.feeds)
    trace = Trace()
    for name, array in results.items():
        if name in stacked:
            trace.steps[stacked[name]] = list(array)
        else:
            trace.values[name] = array
    return trace


#: Column kind -> how to read its intermediates (with each loop step's values, or not).
TRACERS: dict[str, Callable[[Prepared, Request, bool], Trace]] = {
    "tensorrt": trace_tensorrt,
    "onnx": trace_onnx,
}


def locate_columns(prepared: Prepared, request: Request, columns: list[Column]) -> None:
    """Sets ``located`` (or ``unlocated``: why not) on each failing column."""
    note = _steps_unsearched(prepared.rewritten)
    steps = not note
    equations = prepared.reference(intermediate=True)
    rewritten = trace_numpy(prepared.rewritten, prepared.feeds, steps)
    for column in columns:
        tracer = TRACERS.get(column.kind)
        if tracer is None and column.kind != "numpy":
            column.unlocated = ("an engine's intermediate tensors are not outputs; the "
                                "TensorRT network's walk is searched in its own column")
            continue
        candidate = rewritten if tracer is None else tracer(prepared, request, steps)
        search = _Search(prepared, equations, None if column.kind == "numpy" else rewritten,
                         candidate, column.tolerance)
        column.located = search.first_divergence()
        if note and column.located is not None and column.located.step is not None and \
                column.kind != "numpy":
            column.located = replace(column.located, note=note)
        if column.located is None:
            column.unlocated = ("every intermediate value compared agrees within the "
                                "tolerance; only the outputs differ")


def _steps_unsearched(graph: Graph) -> str:
    """Why the loops' steps are not searched, or "" when they are: their values, kept for the
    candidate and for the reference, would pass ``STEP_VALUE_BYTES``."""
    size = 2 * step_value_bytes(graph)
    if size <= STEP_VALUE_BYTES:
        return ""
    return (f"inside the loops only the recurrent layer's output is searched: every step's "
            f"values would take {format_size(size)} (more than {format_size(STEP_VALUE_BYTES)}; "
            f"a shorter sequence searches the steps)")


@dataclass
class _Search:
    """The walk over the rewritten graph in execution order: each value of the candidate
    against its reference, the first beyond the tolerance found."""

    prepared: Prepared
    equations: Mapping[str, np.ndarray]
    rewritten: Trace | None  # None: the candidate is the rewritten graph itself
    candidate: Trace
    tolerance: Tolerance

    def first_divergence(self) -> Located | None:
        for node in self.prepared.rewritten.nodes:
            found = None
            if node.subgraphs and self.rewritten is not None:
                found = self._in_loop(node, self.rewritten)
            if found is None:
                found = self._outputs_of(node)
            if found is not None:
                return found
        return None

    def _in_loop(self, loop: Node, rewritten: Trace) -> Located | None:
        """A loop body, step by step, node by node, against the rewritten graph in numpy."""
        body = [(node, value) for graph in loop.subgraphs for node in graph.nodes
                for value in node.outputs]
        steps = max((len(rewritten.steps.get(value.name, ())) for _, value in body),
                    default=0)
        for step in range(steps):
            for node, value in body:
                row = self._compare(value.name, _at(rewritten.steps, value.name, step),
                                    _at(self.candidate.steps, value.name, step))
                if row is not None and not row.ok:
                    return self._located(loop, value.name, row, node, step)
        return None

    def _outputs_of(self, node: Node) -> Located | None:
        for value in node.outputs:
            want = self.equations.get(value.name)
            if want is None and self.rewritten is not None:
                want = self.rewritten.values.get(value.name)
            row = self._compare(value.name, want, self.candidate.values.get(value.name))
            if row is not None and not row.ok:
                step = _first_step(want, self.candidate.values[value.name], self.tolerance) \
                    if node.subgraphs else None
                return self._located(node, value.name, row, None, step)
        return None

    def _compare(self, name: str, want: np.ndarray | None,
                 got: np.ndarray | None) -> Comparison | None:
        if want is None or got is None or got.size != want.size:
            return None  # a value this candidate keeps under another name, or not at all
        return compare_arrays(name, want, got.reshape(want.shape), self.tolerance)

    def _located(self, node: Node, value: str, row: Comparison, step_node: Node | None,
                 step: int | None) -> Located:
        layer = self.prepared.graph.node(node.origin)
        return Located(node.origin, layer.op if layer is not None else node.op, value, row,
                       _display(step_node) if step_node is not None else "", step)


def _at(steps: Mapping[str, list[np.ndarray]], name: str, step: int) -> np.ndarray | None:
    arrays = steps.get(name, ())
    return arrays[step] if step < len(arrays) else None


def _first_step(want: np.ndarray, got: np.ndarray, tolerance: Tolerance) -> int | None:
    """The first time step (axis 0) of a loop's output beyond the tolerance (the absolute
    term of the whole output's)."""
    got = got.reshape(want.shape)
    tolerance = Tolerance(tolerance.absolute(want), tolerance.rtol)
    for step in range(want.shape[0] if want.ndim else 0):
        if not compare_arrays("", want[step], got[step], tolerance).ok:
            return step
    return None


def _display(node: Node) -> str:
    """``lstm1/o (Sigmoid)`` for the rewrite's ``__lstm1/o``: named after the Caffe layer."""
    name = node.name[2:] if node.name.startswith("__") else node.name
    return f"{name} ({node.op})"
