"""One walker protocol (docs/ops.md, "The first argument"): every walker is the context it hands
to the op facet it calls, walks a graph with the one skeleton of ``caffe_lstm/ir/walk.py``, and
has ``run_subgraph`` as a method of its own; nothing assigns callbacks onto a context."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import numpy as np
import pytest

from caffe_lstm.analysis.shapes import ShapeInference
from caffe_lstm.frontend.caffe_writer import CaffeWriter
from caffe_lstm.backends.dot import DotWriter
from caffe_lstm.backends.numpy_exec import NumpyExecutor
from caffe_lstm.backends.onnx.context import OnnxContext
from caffe_lstm.backends.tensorrt.context import EmitContext
from caffe_lstm.frontend.importer import Importer
from caffe_lstm.ir.graph import Graph, Node, Value
from caffe_lstm.ir.walk import GraphWalker
from caffe_lstm.ops import FACETS, contexts

PACKAGE = Path(__file__).resolve().parents[1] / "caffe_lstm"

#: (walker, the facet it calls with itself as ctx, the context it is)
GRAPH_WALKERS = [
    (ShapeInference, "infer", contexts.ShapeContext),
    (NumpyExecutor, "numpy", contexts.NumpyContext),
    (EmitContext, "tensorrt", contexts.TensorRTContext),
    (OnnxContext, "onnx", contexts.OnnxContext),
    (CaffeWriter, "caffe", contexts.CaffeContext),
    (DotWriter, "dot", contexts.DotContext),
]
#: The importer walks layers, not a graph: it is the context of ``parse`` all the same.
WALKERS = GRAPH_WALKERS + [(Importer, "parse", contexts.ImportContext)]


def _ids(item) -> str:
    return item.__name__ if isinstance(item, type) else str(item)


@pytest.mark.parametrize(("walker", "facet", "context"), GRAPH_WALKERS, ids=_ids)
def test_graph_walkers_use_the_one_skeleton(walker, facet, context):
    assert issubclass(walker, GraphWalker)
    assert walker.facet == facet and facet in FACETS
    for method in ("walk", "walk_values"):  # the skeleton is written once
        assert getattr(walker, method) is getattr(GraphWalker, method), \
            f"{walker.__name__} redefines {method}"
    assert "visit" in vars(walker), f"{walker.__name__} has no visit of its own"


def _facet_calls(walker: type, facet: str) -> list[ast.Call]:
    """The calls ``<something>.<facet>(self, ...)`` in the walker's class body."""
    tree = ast.parse(inspect.getsource(walker).lstrip())
    return [call for call in ast.walk(tree) if isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute) and call.func.attr == facet
            and call.args and isinstance(call.args[0], ast.Name) and call.args[0].id == "self"]


@pytest.mark.parametrize(("walker", "facet", "context"), WALKERS, ids=_ids)
def test_each_walker_is_the_context_it_hands_to_its_facet(walker, facet, context):
    """The facet gets the walker itself (``self``) as ``ctx``; a context's ``run_subgraph``
    (``import_subgraph`` for the importer) is a method of the walker's own class."""
    assert _facet_calls(walker, facet), f"{walker.__name__} never calls {facet}(self, ...)"
    for name in ("run_subgraph", "import_subgraph"):
        if name in vars(context):
            assert inspect.isfunction(vars(walker).get(name)), \
                f"{walker.__name__}.{name} is not a method of its own"


def _context_members() -> set[str]:
    members = set()
    for _, _, context in WALKERS:
        members |= {name for name, value in vars(context).items()
                    if not name.startswith("_") and callable(value)}
    return members


def test_nothing_assigns_a_callback_onto_a_context():
    """No ``ctx.run_subgraph = ...`` (or any other method a context offers) in the package:
    what a facet calls is the walker's own method."""
    ir_fields = {f for cls in (Value, Node, Graph) for f in cls.__dataclass_fields__}
    members = (_context_members() - ir_fields) | {"subgraph_builder"}  # (value.shape = ...)
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
            found += [f"{path.relative_to(PACKAGE)}:{node.lineno} {target.attr}"
                      for target in targets if isinstance(target, ast.Attribute)
                      and target.attr in members]
    assert not found, f"callbacks assigned onto a context: {found}"


def test_no_walker_keeps_an_any_typed_slot():
    """The walkers' attributes are typed: none is a callback slot typed ``Any`` set later."""
    for walker, _, _ in WALKERS:
        source = inspect.getsource(walker)
        assert not re.search(r"self\.\w+: Any = None", source), walker.__name__


def test_the_walk_skeleton_is_written_once():
    """Feeding a graph's inputs into an environment by ``zip(graph.inputs, ...)`` and walking
    its nodes is ``ir/walk.py``'s alone."""
    pattern = re.compile(r"id\(\w+\):\s*\w+\s+for\s+\w+,\s*\w+\s+in\s+zip\(\w+\.inputs")
    found = [str(path.relative_to(PACKAGE)) for path in sorted(PACKAGE.rglob("*.py"))
             if pattern.search(path.read_text(encoding="utf-8"))]
    assert found == ["ir/walk.py"]


def test_subgraphs_are_read_through_the_node():
    """``Node.subgraphs`` is how the library finds a node's body; no module reads
    ``attrs["body"]`` (the Loop op reads its own attributes through ``LoopLayout.of``)."""
    pattern = re.compile(r"""attrs(\.get\(|\[)\s*["']body["']""")
    found = [str(path.relative_to(PACKAGE)) for path in sorted(PACKAGE.rglob("*.py"))
             if pattern.search(path.read_text(encoding="utf-8"))]
    assert found == []


def test_a_walker_needs_only_visit():
    """The skeleton does the rest: a walker counting nodes over a two-node chain gets the
    items its visits return, in order, for the graph outputs."""

    class Counter(GraphWalker[int]):
        facet = "numpy"

        def visit(self, node: Node, inputs: list[int]) -> list[int]:
            return [sum(inputs) + 1 for _ in node.outputs]

    x, y, z = Value("x"), Value("y"), Value("z")
    graph = Graph(nodes=[Node("a", "TanH", [x], [y]), Node("b", "TanH", [y, x], [z])],
                  inputs=[x], outputs=[z, y])
    assert Counter().walk(graph, [10]) == [22, 11]
    assert Node("loop", "Loop", [], [], attrs={"body": graph, "n": 1}).subgraphs == [graph]


def test_a_visit_with_too_few_results_names_the_node():
    """One item per top, or the skeleton says which node broke the rule (not a KeyError at
    some later consumer); a walker without visit cannot be made."""

    class Short(GraphWalker[int]):
        facet = "numpy"

        def visit(self, node: Node, inputs: list[int]) -> list[int]:
            return []

    x, y = Value("x"), Value("y")
    graph = Graph(nodes=[Node("a", "TanH", [x], [y])], inputs=[x], outputs=[y])
    with pytest.raises(TypeError, match="TanH node a: numpy gave 0 result"):
        Short().walk(graph, [1])

    class NoVisit(GraphWalker[int]):
        pass

    with pytest.raises(TypeError):
        NoVisit()


def test_the_numpy_executor_walks_a_loop_body_through_run_subgraph():
    """A graph walker's ``run_subgraph`` is the same skeleton over the body."""
    x, y = Value("x", (2,)), Value("y", (2,))
    body = Graph(nodes=[Node("t", "TanH", [x], [y])], inputs=[x], outputs=[y])
    out, = NumpyExecutor(Graph()).run_subgraph(body, [np.array([0.5, -1.0], np.float32)])
    np.testing.assert_allclose(out, np.tanh([0.5, -1.0]), rtol=1e-6)


def test_a_net_output_that_no_walk_reaches_is_left_alone():
    """A net output may be a net input that no layer reads (dropped from the inputs): the
    walkers that write or shape the whole net walk its values, not its outputs."""
    from caffe_lstm.analysis.shapes import infer_shapes
    from caffe_lstm.backends.dot import write_dot
    from caffe_lstm.frontend.caffe_writer import to_net_parameter

    x, y, unread = Value("x", (2,)), Value("y"), Value("unread", (3,))
    graph = Graph(nodes=[Node("t", "TanH", [x], [y])], inputs=[x], outputs=[y, unread])
    infer_shapes(graph)
    assert y.shape == (2,)
    assert [layer.name for layer in to_net_parameter(graph)[0].layer] == ["input", "t"]
    assert '"value/unread"' in write_dot(graph)
