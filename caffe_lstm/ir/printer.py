"""A deterministic text dump of a graph, one line per node, loop bodies indented.

Golden files in ``tests/golden`` hold such dumps, so a change to a rewrite shows as a diff.
"""

from __future__ import annotations

from typing import Any

from caffe_lstm.ir.graph import Graph, Node, Value


def dump(graph: Graph, indent: str = "") -> str:
    """The graph as text: inputs, outputs, then every node in order."""
    lines = [f"{indent}graph {graph.name or '(unnamed)'}",
             f"{indent}  inputs: {_values(graph.inputs)}",
             f"{indent}  outputs: {_values(graph.outputs)}"]
    for node in graph.nodes:
        lines.append(f"{indent}  {_node_line(node)}")
        for subgraph in _subgraphs(node):  # a Loop's body, indented under it
            lines.append(dump(subgraph, indent + "    ").rstrip("\n"))
    return "\n".join(lines) + "\n"


def _node_line(node: Node) -> str:
    weights = f"; {_values(node.weights)}" if node.weights else ""
    attrs = _attrs(node)
    text = (f"{node.name} = {node.op}({', '.join(v.name for v in node.inputs)}{weights})"
            f" -> {_values(node.outputs)}")
    return f"{text}  {attrs}" if attrs else text


def _subgraphs(node: Node) -> list[Graph]:
    return [value for _, value in sorted(node.attrs.items()) if isinstance(value, Graph)]


def _attrs(node: Node) -> str:
    items = []
    for key in sorted(node.attrs):
        if isinstance(node.attrs[key], Graph):
            continue
        items.append(f"{key}={_attr(node.attrs[key])}")
    return "{" + ", ".join(items) + "}" if items else ""


def _attr(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_attr(v) for v in value) + "]"
    if hasattr(value, "__dataclass_fields__") and value.__dataclass_params__.repr:
        # a dataclass that writes its own repr (LoopState) is printed by it
        fields = ", ".join(f"{k}={getattr(value, k)!r}" for k in value.__dataclass_fields__)
        return f"{type(value).__name__}({fields})"
    return repr(value)


def _values(values: list[Value]) -> str:
    return ", ".join(f"{v.name} {_shape(v.shape)}" for v in values) or "-"


def _shape(shape) -> str:
    return "?" if shape is None else "(" + ", ".join(str(d) for d in shape) + ")"
