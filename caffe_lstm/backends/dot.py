"""Graphviz DOT text of a graph (pure text: writing it needs no Graphviz), and SVG rendering.

What the drawing shows:

- net inputs are ellipses, net outputs double ellipses; every node is a record
  ``{name | op | output shape(s)}`` filled with a colour that a digest of its op picks from
  PALETTE (one op, one colour, in every process);
- nodes inserted by the rewrite (names starting with ``__``) have a dashed border;
- every Loop is a cluster ``cluster_<origin>`` labelled ``loop <origin> (T steps)`` holding its
  body: the step inputs (dashed ellipses: step slices, previous states, invariants), the body's
  nodes, and the Loop node itself, which gathers the sequences and final states and is where the
  loop's results leave the cluster (each op draws itself through its ``dot`` facet, calling
  ``draw_record`` or, holding a subgraph, ``draw_cluster`` of this writer);
- an edge goes from producer to consumer, labelled with the value's shape; the carried states are
  dashed back edges (``constraint=false``) from the node computing the next state to the body
  input that receives it at the next step;
- weights and constants are hidden (they are ``node.weights``, not edges).

Everything comes out in graph order with sorted attributes: the same graph gives the same bytes.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from caffe_lstm.errors import CaffeLstmError, OutputError
from caffe_lstm.files import atomic_output
from caffe_lstm.ir.graph import Graph, Node, Shape, Value
from caffe_lstm.ir.walk import GraphWalker
from caffe_lstm.ops import get_op

#: Fill colours (ColorBrewer Set3), indexed by a digest of the op name.
PALETTE = ("#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462",
           "#b3de69", "#fccde5", "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f")

#: Seconds Graphviz may take to render an SVG.
RENDER_TIMEOUT = 120

_HEADER = (
    '  graph [fontname="Helvetica", rankdir="TB"];',
    '  node [fontname="Helvetica", fontsize="10"];',
    '  edge [fontname="Helvetica", fontsize="9"];',
)
_INPUT_STYLE = {"shape": "ellipse"}
_OUTPUT_STYLE = {"shape": "ellipse", "peripheries": "2"}
_STEP_INPUT_STYLE = {"shape": "ellipse", "style": "dashed"}
_CLUSTER_STYLE = {"color": "#555555", "style": "rounded"}
_BACK_EDGE_STYLE = {"constraint": "false", "style": "dashed", "color": "#1f5fbf"}


class GraphvizUnavailableError(CaffeLstmError):
    """Graphviz's ``dot`` program is not installed (or not on PATH)."""


def write_dot(graph: Graph) -> str:
    """The DOT text of ``graph`` (deterministic: the same graph gives byte-identical text)."""
    return DotWriter().write(graph)


def fill_colour(op: str) -> str:
    """The palette colour of ``op``: a stable digest, never Python's per-process ``hash()``."""
    digest = hashlib.sha256(op.encode("utf-8")).digest()
    return PALETTE[int.from_bytes(digest[:4], "big") % len(PALETTE)]


# ---- the writer --------------------------------------------------------------------------------


class _Ids:
    """Unique node ids and cluster names, handed out in drawing order."""

    def __init__(self) -> None:
        self.taken: set[str] = set()

    def unique(self, base: str, sep: str = "#") -> str:
        name, n = base, 1
        while name in self.taken:
            n += 1
            name = f"{base}{sep}{n}"
        self.taken.add(name)
        return name

    def node(self, name: str) -> str:
        """A quoted DOT id for a node called ``name``."""
        return _quote_id(self.unique(name))

    def cluster(self, origin: str) -> str:
        """``cluster_<origin>`` reduced to [A-Za-z0-9_], so it needs no quotes."""
        return self.unique("cluster_" + re.sub(r"[^A-Za-z0-9_]", "_", origin), sep="_")


@dataclass
class DotWriter(GraphWalker[str]):
    """The walker calling each node's ``dot`` facet: emits node statements as it walks the graph;
    edges are gathered and emitted last, at the top level, so that they never pull a node into a
    cluster. What travels along the edges are the DOT edge tails of the values."""

    facet: ClassVar[str] = "dot"

    lines: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    edges: list[str] = field(default_factory=list)
    sources: dict[int, str] = field(default_factory=dict)  # id(Value) -> edge tail, id(Node) -> id
    ids: _Ids = field(default_factory=_Ids)
    indent: str = "  "  # of the statements being written (deeper inside clusters)

    def write(self, graph: Graph) -> str:
        self.lines += [f"digraph {_quote_id(graph.name or 'net')} {{", *_HEADER]
        tails = [self._value_node("  ", value, "", _INPUT_STYLE) for value in graph.inputs]
        self.sources.update((id(value), tail) for value, tail in zip(graph.inputs, tails))
        self._walk_at(graph, tails, "  ")
        for value in graph.outputs:
            target = self.ids.node(f"output/{value.name}")
            attrs = {**_OUTPUT_STYLE, "label": _value_label(value)}
            self.lines.append(_statement("  ", target, attrs))
            self._edge(value, target)
        return "\n".join(self.lines + self.orphans + self.edges + ["}"]) + "\n"

    def _walk_at(self, graph: Graph, tails: list[str], indent: str) -> None:
        """Draws ``graph``'s nodes (its inputs drawn as ``tails``) with statements at ``indent``."""
        outer, self.indent = self.indent, indent
        try:
            self.walk_values(graph, tails)
        finally:
            self.indent = outer

    def visit(self, node: Node, tails: list[str]) -> list[str]:
        """Draws the node through its ``dot`` facet; returns its outputs' edge tails."""
        get_op(node.op).dot(self, node)
        return [self.sources[id(value)] for value in node.outputs]

    # ---- what the ops' dot facets call ---------------------------------------------------------

    def draw_record(self, node: Node) -> None:
        """A plain node: its record and an edge from every bottom."""
        self._record(node, self.indent, [_output_text(node, v) for v in node.outputs])
        for value in node.inputs:
            self._edge(value, self.sources[id(node)])

    def draw_cluster(self, node: Node, label: str, body: Graph, *, input_roles: list[str],
                     entries: list[tuple[Value, Value]], output_roles: list[str],
                     exits: list[Value], back_edges: list[tuple[Value, Value, str]]) -> None:
        """A node holding ``body``: a cluster of the body's inputs (dashed ellipses labelled
        with ``input_roles``), its nodes and ``node`` itself, whose output ports (labelled with
        ``output_roles``) receive the body values ``exits``, one per port; ``entries`` are the
        (outer value, body input) edges into the cluster and ``back_edges`` the (body output,
        body input, label) edges of carried states."""
        indent, inner = self.indent, self.indent + "  "
        self.lines.append(f"{indent}subgraph {self.ids.cluster(node.origin)} {{")
        self.lines += [f"{inner}{key}={_quote_label(value)};" for key, value
                       in sorted({**_CLUSTER_STYLE, "label": _label_text(label)}.items())]
        for value, role in zip(body.inputs, input_roles):
            self.sources[id(value)] = self._value_node(inner, value, role, _STEP_INPUT_STYLE)
        for outer, step_input in entries:
            self._edge(outer, self.sources[id(step_input)])
        self._walk_at(body, [self.sources[id(value)] for value in body.inputs], inner)
        texts = [_output_text(node, value) + r"\n" + role
                 for value, role in zip(node.outputs, output_roles)]
        self._record(node, inner, texts, ported=True)
        ident = self.sources[id(node)]
        n_plain = len(exits) - len(back_edges)  # the last exits are the carried states
        for port, value in enumerate(exits):
            self._edge(value, f"{ident}:o{port}")
            if port >= n_plain:
                _, previous, edge_label = back_edges[port - n_plain]
                self._edge(value, self.sources[id(previous)], _BACK_EDGE_STYLE, edge_label)
        self.lines.append(f"{indent}}}")

    def _record(self, node: Node, indent: str, output_texts: list[str],
                ported: bool = False) -> None:
        """The node's record; registers its id and its outputs as edge tails (ports o0, o1...
        when it has several outputs, or when ``ported``)."""
        ident = self.ids.node(node.name)
        self.sources[id(node)] = ident
        ported = ported or len(node.outputs) > 1
        self.lines.append(_statement(indent, ident, _record_attrs(node, output_texts, ported)))
        for k, value in enumerate(node.outputs):
            self.sources[id(value)] = f"{ident}:o{k}" if ported else ident

    def _value_node(self, indent: str, value: Value, role: str, style: dict[str, str]) -> str:
        """An ellipse for a net input or a loop's step input: its name, shape and role."""
        ident = self.ids.node(f"input/{value.name}")
        self.lines.append(_statement(indent, ident, {**style, "label": _value_label(value, role)}))
        return ident

    def _edge(self, value: Value, target: str, extra: dict[str, str] | None = None,
              label: str = "") -> None:
        """producer -> target, labelled with the shape; weights and constants are not drawn."""
        if value.is_weight or value.is_constant:
            return
        if id(value) not in self.sources:  # no producer in sight: draw the value on its own
            self.sources[id(value)] = self.ids.node(f"value/{value.name}")
            attrs = {"shape": "ellipse", "style": "dotted", "label": _label_text(value.name)}
            self.orphans.append(_statement("  ", self.sources[id(value)], attrs))
        attrs = {"label": (label + " " if label else "") + _dims(value.shape), **(extra or {})}
        self.edges.append(_statement("  ", f"{self.sources[id(value)]} -> {target}", attrs))


# ---- text --------------------------------------------------------------------------------------


def _record_attrs(node: Node, output_texts: list[str], ported: bool) -> dict[str, str]:
    """``{name | op | outputs}``; several outputs (or ``ported``) get one field (port) each."""
    fields = [_record_text(node.name), _record_text(node.op)]
    if output_texts and not ported:
        fields.append(output_texts[0])
    elif output_texts:
        fields.append("{" + "|".join(f"<o{k}> {t}" for k, t in enumerate(output_texts)) + "}")
    inserted = node.name.startswith("__")
    return {"shape": "record", "label": "{" + "|".join(fields) + "}",
            "style": "dashed,filled" if inserted else "filled",
            "fillcolor": fill_colour(node.op)}


def _value_label(value: Value, role: str = "") -> str:
    """An ellipse's label: the value's name, its shape and, for a loop's step input, its role."""
    return r"\n".join([_label_text(value.name), _dims(value.shape)] + ([role] if role else []))


def _output_text(node: Node, value: Value) -> str:
    """The shape, preceded by the value's name unless it is the node's own name."""
    shape = _dims(value.shape)
    return shape if value.name == node.name else _record_text(value.name) + r"\n" + shape


def _dims(shape: Shape | None) -> str:
    return "?" if shape is None else "(" + ", ".join(str(d) for d in shape) + ")"


def _label_text(text: str) -> str:
    """Text for an escString label: a backslash stands for itself (\\n would be a newline)."""
    return text.replace("\\", "\\\\")


def _record_text(text: str) -> str:
    """Text for a record field: also { } | < > escaped, which would otherwise shape the record."""
    return re.sub(r"([{}|<>])", r"\\\1", _label_text(text))


def _quote_label(text: str) -> str:
    """Quotes already-escaped label text: only ``"`` is escaped here."""
    return '"' + text.replace('"', '\\"') + '"'


def _quote_id(text: str) -> str:
    """A quoted DOT id for any name (``/``, ``@``, ``-``, quotes and backslashes included)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _statement(indent: str, head: str, attrs: dict[str, str]) -> str:
    listed = ", ".join(f"{key}={_quote_label(value)}" for key, value in sorted(attrs.items()))
    return f"{indent}{head} [{listed}];"


# ---- rendering ---------------------------------------------------------------------------------


def render_svg(dot_path: Path, svg_path: Path, timeout: float = RENDER_TIMEOUT) -> None:
    """Renders the DOT file ``dot_path`` to ``svg_path`` (atomically) with Graphviz's ``dot``."""
    program = graphviz_program()
    with atomic_output(svg_path) as tmp:
        try:
            done = subprocess.run([program, "-Tsvg", "-o", str(tmp), str(dot_path)],
                                  capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise OutputError(f"Graphviz took longer than {timeout:g} s to render the SVG",
                              str(svg_path), f"render it yourself: dot -Tsvg {dot_path}") from None
        if done.returncode != 0:
            reason = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[0]
            raise OutputError(f"Graphviz could not render the SVG ({reason})", str(svg_path))


def graphviz_program() -> str:
    """The path of Graphviz's ``dot``, or GraphvizUnavailableError saying how to install it."""
    program = shutil.which("dot")
    if program is None:
        raise GraphvizUnavailableError(
            "rendering SVG needs Graphviz's `dot` program, which is not on PATH", "",
            "install Graphviz (apt-get install graphviz, or brew install graphviz) "
            "or do not render SVG")
    return program
