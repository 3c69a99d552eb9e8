"""The recurrent layers' rules: parsing recurrent_param, the variant's checks and the shapes of
the bottoms (recurrent_layer.cpp Reshape, the Lstm fork's LayerSetUp)."""

from __future__ import annotations

import math
from typing import Any

from caffe_lstm.ir.graph import Node, Shape
from caffe_lstm.ops.recurrent.cell import EXTENSION_FIELDS, RECURRENT_ACTIVATIONS, LstmVariant
from caffe_lstm.ops.registry import count, shape_error


#: The fields of cuDNN-engine forks that make one layer a stack (proto/caffe.proto, Part B):
#: num_layers levels, each reading the previous level's h; dropout between them (training only).
STACK_FIELDS = ("num_layers", "dropout_ratio")


def parse_recurrent(p: Any) -> dict[str, Any]:
    """recurrent_param: num_output, expose_hidden, and the extension and stack fields written
    in the net (by presence, so that an RNN that sets one can be told so, and a writer writes
    it back; ``stack`` only when the net writes one of its fields)."""
    attrs = {"num_output": p.num_output, "expose_hidden": p.expose_hidden,
             "extensions": {name: getattr(p, name) for name in EXTENSION_FIELDS if p.has(name)}}
    stack = {name: getattr(p, name) for name in STACK_FIELDS if p.has(name)}
    return {**attrs, "stack": stack} if stack else attrs


def write_recurrent(node: Node) -> dict[str, Any]:
    """recurrent_param: num_output, expose_hidden and the extension and stack fields set."""
    attrs = dict(node.attrs)
    extensions, stack = attrs.pop("extensions", {}), attrs.pop("stack", {})
    return {**attrs, **extensions, **stack}


def num_layers(node: Node) -> int:
    """The levels of a recurrent layer: recurrent_param.num_layers, 1 when not written."""
    return node.attrs.get("stack", {}).get("num_layers", 1)


def is_one_level(node: Node) -> bool:
    """Whether the layer is one level (not a num_layers stack)."""
    return num_layers(node) == 1


def check_stack(node: Node, shapes: tuple[Shape, ...]) -> None:
    """num_layers >= 1; a stack (> 1) is Caffe's LSTM cell level after level: no extension
    fields, no static input, no exposed states (they would be (L, N, H))."""
    levels = num_layers(node)
    if levels < 1:
        raise shape_error(node, f"recurrent_param.num_layers is {levels}, expected >= 1",
                          "1 is one layer; more stacks that many levels in the layer")
    if levels == 1:
        return
    hint = "write the stack as one layer per level (num_layers 1) to use this"
    if node.op != "LSTM":
        raise shape_error(node, f"recurrent_param.num_layers is {levels}: stacks are read for "
                          "LSTM only", hint)
    if node.attrs.get("extensions"):
        raise shape_error(node, f"recurrent_param.num_layers is {levels} with cell variant "
                          "fields: a stack takes Caffe's cell", hint)
    if node.attrs.get("expose_hidden"):
        raise shape_error(node, f"recurrent_param.num_layers is {levels} with expose_hidden: "
                          "the states of a stack are not exposed", hint)
    if len(shapes) != 2:
        raise shape_error(node, f"recurrent_param.num_layers is {levels}: a stack has the "
                          f"bottoms x and cont only, found {len(shapes)}", hint)


def _prototxt(value: Any) -> str:
    """A value spelled as in a prototxt (``true``, ``16``, ``RELU``, ``-1``)."""
    if isinstance(value, bool):
        return str(value).lower()
    return f"{value:g}" if isinstance(value, float) else str(value)


# ---- the variant's rules ----------------------------------------------------------------------


def reject_extensions(node: Node) -> None:
    """RNN: the extension fields are LSTM's; an RNN that sets one is refused, naming them."""
    fields_set = node.attrs.get("extensions", {})
    if fields_set:
        found = ", ".join(f"recurrent_param.{name}: {_prototxt(value)}"
                          for name, value in fields_set.items())
        raise shape_error(node, f"{found} is set, but {node.op} has no cell variants",
                          "the recurrent_param extension applies to LSTM only; remove the field")


def check_variant(node: Node) -> None:
    """Raises ShapeError for an LSTM variant that cannot work."""
    variant, given = LstmVariant.of(node), node.attrs.get("extensions", {})
    for name in ("candidate_activation", "cell_activation"):
        if getattr(variant, name) not in RECURRENT_ACTIVATIONS:
            raise shape_error(node, f"recurrent_param.{name} is {getattr(variant, name)!r}",
                              f"use one of {', '.join(RECURRENT_ACTIVATIONS)}")
    kappa = variant.relu_clip
    if variant.uses_clipped_relu and not (0 < kappa < math.inf):
        raise shape_error(node, f"recurrent_param.relu_clip is {_prototxt(kappa)}, expected a "
                          "finite value > 0 for CLIPPED_RELU", "min(max(x, 0), relu_clip) "
                          "needs a positive ceiling; use RELU for no ceiling")
    if "relu_clip" in given and not variant.uses_clipped_relu:
        raise shape_error(node, f"recurrent_param.relu_clip: {_prototxt(kappa)} is set but no "
                          "activation is CLIPPED_RELU, so it would do nothing",
                          "set candidate_activation (or cell_activation) to CLIPPED_RELU, "
                          "or remove relu_clip")
    if not 0 <= variant.cell_clip < math.inf:
        raise shape_error(node, f"recurrent_param.cell_clip is {_prototxt(variant.cell_clip)}, "
                          "expected a finite value >= 0", "0 means no cell clipping")


def has_static(node: Node, n_states: int) -> bool:
    """Whether an LSTM/RNN has the x_static bottom: x, cont, [x_static], [exposed states]."""
    exposed = n_states if node.attrs.get("expose_hidden") else 0
    return len(node.inputs) - 2 - exposed == 1


def state_widths(node: Node) -> tuple[int, ...]:
    """The widths of an LSTM's or RNN's carried states, in bottom order: (R, H) or (H,)."""
    if node.op == "RNN":
        return (node.attrs["num_output"],)
    return tuple(width for _, width in lstm_states(node))


def lstm_states(node: Node) -> tuple[tuple[str, int], ...]:
    """The exposed states of an LSTM and their widths: r_0 (R) or h_0 (H), then c_0 (H)."""
    hidden, variant = node.attrs["num_output"], LstmVariant.of(node)
    return (f"{variant.recurrent_name}_0", variant.recurrent_width(hidden)), ("c_0", hidden)


# ---- shape rules (recurrent_layer.cpp Reshape, Lstm fork LayerSetUp) ------------------------


def check_num_output(node: Node, hidden: int, param: str) -> None:
    if hidden <= 0:
        raise shape_error(node, f"num_output is {hidden}, expected > 0",
                          f"set {param}.num_output")


def check_exact(node: Node, what: str, found: Shape, expected: Shape) -> None:
    if tuple(found) != tuple(expected):
        raise shape_error(node, f"{what} must have shape {tuple(expected)}, found {tuple(found)}")


def check_top_count(node: Node, expected: int, names: str, hint: str = "") -> None:
    if len(node.outputs) != expected:
        raise shape_error(node, f"expected {expected} top(s) ({names}), found {len(node.outputs)}",
                          hint)


def one_state_tops(node: Node, steps: int, batch: int, top: str) -> tuple[Shape, ...]:
    """The tops of a layer carrying one H-wide state h (RNN, GRU): ``top`` (T, N, H), and
    h_T (1, N, H) with expose_hidden."""
    hidden = node.attrs["num_output"]
    if node.attrs["expose_hidden"]:
        check_top_count(node, 2, f"{top}, h_T")
        return (steps, batch, hidden), (1, batch, hidden)
    check_top_count(node, 1, top, "h_T is a top only with expose_hidden")
    return ((steps, batch, hidden),)


def _check_bottom_count(node: Node, n_found: int, states: tuple[str, ...]) -> None:
    """x, cont, [x_static], then the exposed states: len(states) + 2 or + 3 bottoms."""
    low = 2 + len(states)
    if n_found not in (low, low + 1):
        names = ", ".join(("x", "cont", "[x_static]") + states)
        raise shape_error(node, f"expected {low} or {low + 1} bottoms ({names}), found {n_found}",
                          "initial states are bottoms only with recurrent_param.expose_hidden")


def check_x(node: Node, x: Shape) -> None:
    if len(x) < 2 or x[0] < 1:
        raise shape_error(node, f"x must be (T, N, ...) with T >= 1, found {tuple(x)}",
                          "the first bottom is the time-major sequence")


def _check_static(node: Node, static: Shape, batch: int) -> None:
    if len(static) < 1 or static[0] != batch:
        raise shape_error(node,
                          f"x_static must be (N, ...) with N = {batch}, found {tuple(static)}")


def recurrent_layout(node: Node, shapes: tuple[Shape, ...], states: tuple[tuple[str, int], ...]
                      ) -> tuple[int, int, int, int | None]:
    """Validates the bottoms x, cont, [x_static], [states (1, N, width)]; returns T, N, I and
    S (or None)."""
    hidden = node.attrs["num_output"]
    check_num_output(node, hidden, "recurrent_param")
    exposed = states if node.attrs["expose_hidden"] else ()
    _check_bottom_count(node, len(shapes), tuple(name for name, _ in exposed))
    x, cont = shapes[0], shapes[1]
    check_x(node, x)
    steps, batch = x[0], x[1]
    check_exact(node, "cont", cont, (steps, batch))
    static = shapes[2] if len(shapes) == 3 + len(exposed) else None
    if static is not None:
        _check_static(node, static, batch)
    for (name, width), shape in zip(exposed, shapes[len(shapes) - len(exposed):]):
        check_exact(node, name, shape, (1, batch, width))
    return steps, batch, count(x, 2), None if static is None else count(static, 1)

