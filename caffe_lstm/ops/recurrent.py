"""Recurrent layers executed directly from their equations: LSTM, RNN and the fork type Lstm.

These facets are the ground truth that the LSTM expansion pass is checked against, so the math
is written out literally, step by step, in float64 (float32 in and out).

Each ``numpy`` call is one Forward from a zero initial state (or from the h_0/c_0 bottoms with
``expose_hidden``). Caffe without ``expose_hidden`` starts each Forward from the previous
Forward's h_T/c_T (recurrent_layer.cpp); that hidden carry-over is not modelled here: it is a
later CLI option. With cont_1 = 0 (the usual deploy case) the two agree.

LSTM also takes the ``recurrent_param`` extension of spec/recurrent-extensions.md (candidate
and cell activations, peepholes, a recurrent projection, cell clipping): ``LstmVariant``.
RNN accepts none of its fields; the fork's ``lstm_param`` has none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

import numpy as np

from caffe_lstm.ir.graph import Node, Shape
from caffe_lstm.ops.registry import Op, count, register_op, shape_error

#: The gate blocks along every 4H axis of Caffe's LSTM blobs, in order (lstm_unit_layer.cpp).
CAFFE_GATES = ("i", "f", "o", "g")
#: The rows of the peephole blob P (3, H), in order (spec/recurrent-extensions.md).
PEEPHOLE_GATES = ("i", "f", "o")
#: The values of the extension's enum RecurrentActivation.
RECURRENT_ACTIVATIONS = ("TANH", "SIGMOID", "RELU", "CLIPPED_RELU", "IDENTITY")


@dataclass(frozen=True)
class LstmVariant:
    """An LSTM cell's variant: the extension fields, each at its default unless set.

    With every field at its default the cell is exactly Caffe's LSTM.
    """

    candidate_activation: str = "TANH"  # g
    cell_activation: str = "TANH"  # h in m_t = o_t ⊙ h(c_t)
    relu_clip: float = 20.0  # κ of CLIPPED_RELU: min(max(x, 0), κ)
    peephole: bool = False  # adds P (3, H)
    num_proj: int = 0  # P > 0 adds W_hr (P, H); the recurrent output r is then P wide
    cell_clip: float = 0.0  # > 0: the stored cell is clamped to [−cell_clip, cell_clip]

    @staticmethod
    def of(node: Node) -> LstmVariant:
        """The variant of an LSTM node, from the fields its recurrent_param sets."""
        return LstmVariant(**node.attrs.get("extensions", {}))

    def recurrent_width(self, hidden: int) -> int:
        """R, the width of the recurrent output r: num_proj if set, else H."""
        return self.num_proj or hidden

    @property
    def recurrent_name(self) -> str:
        """The recurrent output's name: the spec's ``r`` with a projection, else Caffe's ``h``."""
        return "r" if self.num_proj else "h"

    @property
    def uses_clipped_relu(self) -> bool:
        return "CLIPPED_RELU" in (self.candidate_activation, self.cell_activation)


#: The extension's field names, in the spec's order.
EXTENSION_FIELDS = tuple(f.name for f in fields(LstmVariant))


class LstmBlobs(NamedTuple):
    """An LSTM's blobs by role (arrays, or weight Values); None where the net has none."""

    w_xc: Any
    b_c: Any
    w_xc_static: Any
    w_hc: Any
    p: Any
    w_hr: Any

    @staticmethod
    def split(blobs: list, has_static: bool, variant: LstmVariant) -> LstmBlobs:
        """The blobs in the spec's order: W_xc, b_c, [W_xc_static], W_hc, [P], [W_hr]."""
        it = iter(blobs)
        w_xc, b_c = next(it), next(it)
        static = next(it) if has_static else None
        w_hc = next(it)
        p = next(it) if variant.peephole else None
        w_hr = next(it) if variant.num_proj else None
        return LstmBlobs(w_xc, b_c, static, w_hc, p, w_hr)


def _parse_recurrent(p: Any) -> dict[str, Any]:
    """recurrent_param: num_output, expose_hidden, and the extension fields written in the net
    (by presence, so that an RNN that sets one can be told so, and a writer writes it back)."""
    return {"num_output": p.num_output, "expose_hidden": p.expose_hidden,
            "extensions": {name: getattr(p, name) for name in EXTENSION_FIELDS if p.has(name)}}


def _prototxt(value: Any) -> str:
    """A value spelled as in a prototxt (``true``, ``16``, ``RELU``, ``-1``)."""
    if isinstance(value, bool):
        return str(value).lower()
    return f"{value:g}" if isinstance(value, float) else str(value)


# ---- the variant's rules ----------------------------------------------------------------------


def _reject_extensions(node: Node) -> None:
    """RNN: the extension fields are LSTM's; an RNN that sets one is refused, naming them."""
    fields_set = node.attrs.get("extensions", {})
    if fields_set:
        found = ", ".join(f"recurrent_param.{name}: {_prototxt(value)}"
                          for name, value in fields_set.items())
        raise shape_error(node, f"{found} is set, but RNN has no cell variants",
                          "the recurrent_param extension applies to LSTM only; remove the field")


def _check_variant(node: Node) -> None:
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


def state_widths(node: Node) -> tuple[int, ...]:
    """The widths of an LSTM's or RNN's carried states, in bottom order: (R, H) or (H,)."""
    if node.op == "RNN":
        return (node.attrs["num_output"],)
    return tuple(width for _, width in _lstm_states(node))


def _lstm_states(node: Node) -> tuple[tuple[str, int], ...]:
    """The exposed states of an LSTM and their widths: r_0 (R) or h_0 (H), then c_0 (H)."""
    hidden, variant = node.attrs["num_output"], LstmVariant.of(node)
    return (f"{variant.recurrent_name}_0", variant.recurrent_width(hidden)), ("c_0", hidden)


# ---- shape rules (recurrent_layer.cpp Reshape, Lstm fork LayerSetUp) ------------------------


def _check_num_output(node: Node, hidden: int, param: str) -> None:
    if hidden <= 0:
        raise shape_error(node, f"num_output is {hidden}, expected > 0",
                          f"set {param}.num_output")


def _check_exact(node: Node, what: str, found: Shape, expected: Shape) -> None:
    if tuple(found) != tuple(expected):
        raise shape_error(node, f"{what} must have shape {tuple(expected)}, found {tuple(found)}")


def _check_top_count(node: Node, expected: int, names: str, hint: str = "") -> None:
    if len(node.outputs) != expected:
        raise shape_error(node, f"expected {expected} top(s) ({names}), found {len(node.outputs)}",
                          hint)


def _check_bottom_count(node: Node, n_found: int, states: tuple[str, ...]) -> None:
    """x, cont, [x_static], then the exposed states: len(states) + 2 or + 3 bottoms."""
    low = 2 + len(states)
    if n_found not in (low, low + 1):
        names = ", ".join(("x", "cont", "[x_static]") + states)
        raise shape_error(node, f"expected {low} or {low + 1} bottoms ({names}), found {n_found}",
                          "initial states are bottoms only with recurrent_param.expose_hidden")


def _check_x(node: Node, x: Shape) -> None:
    if len(x) < 2 or x[0] < 1:
        raise shape_error(node, f"x must be (T, N, ...) with T >= 1, found {tuple(x)}",
                          "the first bottom is the time-major sequence")


def _check_static(node: Node, static: Shape, batch: int) -> None:
    if len(static) < 1 or static[0] != batch:
        raise shape_error(node,
                          f"x_static must be (N, ...) with N = {batch}, found {tuple(static)}")


def _recurrent_layout(node: Node, shapes: tuple[Shape, ...], states: tuple[tuple[str, int], ...]
                      ) -> tuple[int, int, int, int | None]:
    """Validates the bottoms x, cont, [x_static], [states (1, N, width)]; returns T, N, I and
    S (or None)."""
    hidden = node.attrs["num_output"]
    _check_num_output(node, hidden, "recurrent_param")
    exposed = states if node.attrs["expose_hidden"] else ()
    _check_bottom_count(node, len(shapes), tuple(name for name, _ in exposed))
    x, cont = shapes[0], shapes[1]
    _check_x(node, x)
    steps, batch = x[0], x[1]
    _check_exact(node, "cont", cont, (steps, batch))
    static = shapes[2] if len(shapes) == 3 + len(exposed) else None
    if static is not None:
        _check_static(node, static, batch)
    for (name, width), shape in zip(exposed, shapes[len(shapes) - len(exposed):]):
        _check_exact(node, name, shape, (1, batch, width))
    return steps, batch, count(x, 2), None if static is None else count(static, 1)


# ---- the equations ----------------------------------------------------------------------------


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # σ(x) = 1 / (1 + e^−x) = 0.5·tanh(0.5·x) + 0.5, which cannot overflow
    return 0.5 * np.tanh(0.5 * x) + 0.5


def _activate(kind: str, x: np.ndarray, relu_clip: float) -> np.ndarray:
    """A RecurrentActivation: TANH, SIGMOID, RELU, CLIPPED_RELU min(max(x, 0), κ), IDENTITY."""
    if kind == "TANH":
        return np.tanh(x)
    if kind == "SIGMOID":
        return _sigmoid(x)
    if kind == "RELU":
        return np.maximum(x, 0.0)
    if kind == "CLIPPED_RELU":
        return np.minimum(np.maximum(x, 0.0), relu_clip)
    return x  # IDENTITY


def _project_inputs(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """x_transform: X = x·Wᵀ + b for all steps at once, x flattened from axis 2 (T, N, out)."""
    steps, batch = x.shape[:2]
    return x.reshape(steps, batch, count(x.shape, 2)) @ w.T + b


def _project_static(x_static: np.ndarray | None, w: np.ndarray | None) -> np.ndarray | float:
    """W_xc_x_static = x_static·W_staticᵀ (no bias) -> (N, out); 0 without a static input."""
    if x_static is None:
        return 0.0
    return x_static.reshape(x_static.shape[0], -1) @ w.T


def _split_gates(gate_input: np.ndarray) -> dict[str, np.ndarray]:
    """The 4H pre-activations cut into H-wide blocks, by gate name."""
    return dict(zip(CAFFE_GATES, np.split(gate_input, len(CAFFE_GATES), axis=-1)))


@dataclass(frozen=True)
class _Cell:
    """The recurrent weights of an LSTM (float64) and its variant."""

    w_hc: np.ndarray
    variant: LstmVariant = LstmVariant()
    p: np.ndarray | None = None  # (3, H), rows PEEPHOLE_GATES
    w_hr: np.ndarray | None = None  # (P, H)

    def peephole(self, gate: str, c: np.ndarray) -> np.ndarray | float:
        """p_gate ⊙ c, or 0 without peepholes."""
        return 0.0 if self.p is None else self.p[PEEPHOLE_GATES.index(gate)] * c


def _lstm_step(x_proj_t: np.ndarray, cont_t: np.ndarray, r: np.ndarray, c: np.ndarray,
               cell: _Cell) -> tuple[np.ndarray, np.ndarray]:
    """One step of spec/recurrent-extensions.md (with defaults: lstm_layer.cpp's unrolled net
    and LSTMUnit); r is (N, R), c (N, H), cont_t (N,)."""
    v, cont = cell.variant, cont_t[:, None]
    # r̃ = cont_t · r_{t−1}, c̃ = cont_t · c_{t−1}   (a product, not a select)
    r_conted, c_conted = cont * r, cont * c
    # a_t = W_hc·r̃ + W_xc·x_t + b_c (+ W_xc_static·x_static, already in x_proj_t)
    a = _split_gates(r_conted @ cell.w_hc.T + x_proj_t)
    # i_t = σ(a_i + p_i ⊙ c̃), f_t = σ(a_f + p_f ⊙ c̃)   (peephole terms only with peephole)
    i = _sigmoid(a["i"] + cell.peephole("i", c_conted))
    f = _sigmoid(a["f"] + cell.peephole("f", c_conted))
    # g_t = candidate_activation(a_g)
    g = _activate(v.candidate_activation, a["g"], v.relu_clip)
    # c_t = f_t ⊙ c̃ + i_t ⊙ g_t
    c = f * c_conted + i * g
    if v.cell_clip > 0:
        # c_t = clamp(c_t, −cell_clip, cell_clip): the stored state, after the update
        c = np.clip(c, -v.cell_clip, v.cell_clip)
    # o_t = σ(a_o + p_o ⊙ c_t)   (the output peephole sees the NEW cell)
    o = _sigmoid(a["o"] + cell.peephole("o", c))
    # m_t = o_t ⊙ cell_activation(c_t)
    m = o * _activate(v.cell_activation, c, v.relu_clip)
    # r_t = W_hr·m_t with a projection, else m_t
    return (m if cell.w_hr is None else m @ cell.w_hr.T), c


def _run_lstm(x_proj: np.ndarray, cont: np.ndarray, r: np.ndarray, c: np.ndarray,
              cell: _Cell) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All T steps from (r_0, c_0): returns the stacked r (T, N, R), r_T (N, R), c_T (N, H)."""
    rs = []
    for x_proj_t, cont_t in zip(x_proj, cont):
        r, c = _lstm_step(x_proj_t, cont_t, r, c, cell)
        rs.append(r)
    return np.stack(rs), r, c


def _rnn_step(x_proj_t: np.ndarray, cont_t: np.ndarray, h: np.ndarray, w_hh: np.ndarray,
              w_ho: np.ndarray, b_o: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One step of rnn_layer.cpp's unrolled net: returns (o_t, h_t), each (N, H)."""
    # h_conted_{t-1} = cont_t · h_{t-1}
    h_conted = cont_t[:, None] * h
    # h_t = tanh(W_hh·h_conted_{t-1} + W_xh_x_t (+ W_xh_x_static, already in x_proj_t))
    h = np.tanh(h_conted @ w_hh.T + x_proj_t)
    # o_t = tanh(W_ho·h_t + b_o)
    o = np.tanh(h @ w_ho.T + b_o)
    return o, h


def _split_arrays(node: Node, arrays: tuple[np.ndarray, ...], n_states: int):
    """A numpy facet's arguments as float64 (x, cont, x_static or None, exposed states, blobs)."""
    n_bottoms = len(node.inputs)
    x, cont, *extra = [np.asarray(a, np.float64) for a in arrays[:n_bottoms]]
    blobs = [np.asarray(a, np.float64) for a in arrays[n_bottoms:]]
    n_exposed = n_states if node.attrs["expose_hidden"] else 0
    x_static = extra[0] if len(extra) > n_exposed else None
    return x, cont, x_static, extra[len(extra) - n_exposed:], blobs


def _initial_state(exposed: list[np.ndarray], index: int, batch: int, width: int) -> np.ndarray:
    """State ``index`` from the exposed (1, N, width) bottoms, else zeros (one fresh Forward)."""
    return exposed[index].reshape(batch, width) if exposed else np.zeros((batch, width))


def _float32(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    return tuple(np.asarray(a, np.float32) for a in arrays)


# ---- the ops ----------------------------------------------------------------------------------


def _lstm_layout(node: Node, shapes: tuple[Shape, ...]) -> tuple[int, int, int, int | None]:
    """The variant's rules, then the bottoms; returns T, N, I and S (or None)."""
    _check_variant(node)
    return _recurrent_layout(node, shapes, _lstm_states(node))


@register_op
class LSTM(Op):
    """Caffe's LSTM over T steps (recurrent_param: num_output H, expose_hidden, and the
    extension of spec/recurrent-extensions.md: candidate_activation g, cell_activation h,
    relu_clip κ, peephole, num_proj P, cell_clip).

    Bottoms x (T, N, ...), cont (T, N), [x_static (N, ...)], [r_0 (1, N, R), c_0 (1, N, H)];
    tops r (T, N, R) [, r_T (1, N, R), c_T (1, N, H)], R = P if num_proj else H (r is h
    without a projection). Blobs W_xc (4H, I), b_c (4H), [W_xc_static (4H, S)], W_hc (4H, R),
    [P (3, H): rows p_i, p_f, p_o], [W_hr (P, H)]; gate blocks i, f, o, g. Per step, with
    r̃ = cont_t·r_{t−1} and c̃ = cont_t·c_{t−1}:
    a_t = W_hc·r̃ + W_xc·x_t + b_c [+ W_xc_static·x_static]; i, f = σ(a_i,f + p_i,f ⊙ c̃);
    c_t = f_t ⊙ c̃ + i_t ⊙ g(a_g) [clamped to ±cell_clip]; o_t = σ(a_o + p_o ⊙ c_t);
    m_t = o_t ⊙ h(c_t); r_t = W_hr·m_t or m_t. Defaults: exactly Caffe's cell.
    Without expose_hidden each call starts from zeros (no carry-over between calls).
    """

    type = "LSTM"
    tensorrt_missing_reason = "expanded by the recurrent rewrite first (run the default pipeline)"
    param = "recurrent_param"
    n_bottoms = (2, 5)
    n_tops = (1, 3)

    @staticmethod
    def parse(p):
        return _parse_recurrent(p)

    @staticmethod
    def infer(node: Node, *shapes: Shape) -> tuple[Shape, ...]:
        steps, batch, _, _ = _lstm_layout(node, shapes)
        variant, hidden = LstmVariant.of(node), node.attrs["num_output"]
        width, r = variant.recurrent_width(hidden), variant.recurrent_name
        if node.attrs["expose_hidden"]:
            _check_top_count(node, 3, f"{r}, {r}_T, c_T")
            return (steps, batch, width), (1, batch, width), (1, batch, hidden)
        _check_top_count(node, 1, r, f"{r}_T and c_T are tops only with expose_hidden")
        return ((steps, batch, width),)

    @staticmethod
    def blobs(node: Node, *shapes: Shape) -> tuple[tuple[str, Shape], ...]:
        _, _, inputs, static = _lstm_layout(node, shapes)
        variant, hidden = LstmVariant.of(node), node.attrs["num_output"]
        gates = len(CAFFE_GATES) * hidden
        static_blob = (("W_xc_static", (gates, static)),) if static is not None else ()
        peephole = (("P", (len(PEEPHOLE_GATES), hidden)),) if variant.peephole else ()
        projection = (("W_hr", (variant.num_proj, hidden)),) if variant.num_proj else ()
        return (("W_xc", (gates, inputs)), ("b_c", (gates,)), *static_blob,
                ("W_hc", (gates, variant.recurrent_width(hidden))), *peephole, *projection)

    @staticmethod
    def numpy(node: Node, *arrays):
        x, cont, x_static, exposed, blobs = _split_arrays(node, arrays, 2)
        variant, hidden = LstmVariant.of(node), node.attrs["num_output"]
        w = LstmBlobs.split(blobs, x_static is not None, variant)
        batch = x.shape[1]
        # W_xc_x_t + W_xc_x_static: the static term is the same at every step
        x_proj = _project_inputs(x, w.w_xc, w.b_c) + _project_static(x_static, w.w_xc_static)
        r0 = _initial_state(exposed, 0, batch, variant.recurrent_width(hidden))
        c0 = _initial_state(exposed, 1, batch, hidden)
        cell = _Cell(w.w_hc, variant, w.p, w.w_hr)
        r, r_last, c_last = _run_lstm(x_proj, cont, r0, c0, cell)
        if node.attrs["expose_hidden"]:
            return _float32(r, r_last[None], c_last[None])
        return _float32(r)


@register_op
class RNN(Op):
    """Caffe's vanilla RNN over T steps (recurrent_param: num_output H, expose_hidden).

    Bottoms x (T, N, ...), cont (T, N), [x_static (N, ...)], [h_0 (1, N, H)]; tops o (T, N, H)
    [, h_T (1, N, H)]. Blobs W_xh (H, I), b_h (H), [W_xh_static (H, S)], W_hh, W_ho (H, H),
    b_o (H). Per step:
    h_t = tanh(W_hh·(cont_t·h_{t-1}) + W_xh·x_t + b_h [+ W_xh_static·x_static]);
    o_t = tanh(W_ho·h_t + b_o). Without expose_hidden each call starts from zeros.
    The LSTM extension fields of recurrent_param are refused.
    """

    type = "RNN"
    tensorrt_missing_reason = "expanded by the recurrent rewrite first (run the default pipeline)"
    param = "recurrent_param"
    n_bottoms = (2, 4)
    n_tops = (1, 2)

    @staticmethod
    def parse(p):
        return _parse_recurrent(p)

    @staticmethod
    def infer(node: Node, *shapes: Shape) -> tuple[Shape, ...]:
        steps, batch, _, _ = _rnn_layout(node, shapes)
        hidden = node.attrs["num_output"]
        if node.attrs["expose_hidden"]:
            _check_top_count(node, 2, "o, h_T")
            return (steps, batch, hidden), (1, batch, hidden)
        _check_top_count(node, 1, "o", "h_T is a top only with expose_hidden")
        return ((steps, batch, hidden),)

    @staticmethod
    def blobs(node: Node, *shapes: Shape) -> tuple[tuple[str, Shape], ...]:
        _, _, inputs, static = _rnn_layout(node, shapes)
        hidden = node.attrs["num_output"]
        static_blob = (("W_xh_static", (hidden, static)),) if static is not None else ()
        return (("W_xh", (hidden, inputs)), ("b_h", (hidden,)), *static_blob,
                ("W_hh", (hidden, hidden)), ("W_ho", (hidden, hidden)), ("b_o", (hidden,)))

    @staticmethod
    def numpy(node: Node, *arrays):
        x, cont, x_static, exposed, blobs = _split_arrays(node, arrays, 1)
        w_xh, b_h, *w_static, w_hh, w_ho, b_o = blobs
        # W_xh_x_t + W_xh_x_static: the static term is the same at every step
        x_proj = _project_inputs(x, w_xh, b_h) + _project_static(x_static, (w_static or [None])[0])
        h = _initial_state(exposed, 0, x.shape[1], node.attrs["num_output"])
        outputs = []
        for x_proj_t, cont_t in zip(x_proj, cont):
            o, h = _rnn_step(x_proj_t, cont_t, h, w_hh, w_ho, b_o)
            outputs.append(o)
        if node.attrs["expose_hidden"]:
            return _float32(np.stack(outputs), h[None])
        return _float32(np.stack(outputs))


def _rnn_layout(node: Node, shapes: tuple[Shape, ...]) -> tuple[int, int, int, int | None]:
    """No extension fields, then the bottoms; returns T, N, I and S (or None)."""
    _reject_extensions(node)
    return _recurrent_layout(node, shapes, (("h_0", node.attrs["num_output"]),))


# ---- the junhyukoh/caffe-lstm fork type "Lstm" (caffe_ocr, CTPN) -----------------------------


def _fork_layout(node: Node, shapes: tuple[Shape, ...]) -> tuple[int, int, int]:
    """Validates a fork Lstm's x and optional clip; returns T, N, I."""
    _check_num_output(node, node.attrs["num_output"], "lstm_param")
    if len(shapes) not in (1, 2):
        raise shape_error(node, f"expected 1 or 2 bottoms (x, [clip]), found {len(shapes)}")
    _check_top_count(node, 1, "h")
    steps, batch, inputs = _fork_sequence(node, shapes[0])
    if len(shapes) == 2:
        _check_clip(node, shapes[0], shapes[1], steps, batch)
    return steps, batch, inputs


def _fork_sequence(node: Node, x: Shape) -> tuple[int, int, int]:
    """T, N, I: 2-D x is junhyukoh's (T·N, I) with N = batch_size; else (T, N, ...)."""
    if len(x) >= 3:
        _check_x(node, x)
        return x[0], x[1], count(x, 2)
    batch = node.attrs["batch_size"]
    if len(x) != 2 or batch <= 0 or x[0] < 1 or x[0] % batch:
        raise shape_error(
            node, f"x must be (T·N, I) with N = batch_size = {batch}, or (T, N, ...); "
            f"found {tuple(x)}", "set lstm_param.batch_size to the number of streams")
    return x[0] // batch, batch, x[1]


def _check_clip(node: Node, x: Shape, clip: Shape, steps: int, batch: int) -> None:
    """clip is (T, N) for a (T, N, ...) x, and any shape of T·N values for a 2-D x."""
    if len(x) >= 3:
        _check_exact(node, "clip", clip, (steps, batch))
    elif count(clip) != steps * batch:
        raise shape_error(node, f"clip must hold T·N = {steps * batch} values, "
                          f"found {count(clip)} (shape {tuple(clip)})")


@register_op
class Lstm(Op):
    """The junhyukoh/caffe-lstm fork's LSTM (lstm_param: num_output H, batch_size).

    Same cell as ``LSTM`` with clip in the role of cont, and blobs W_x (4H, I), W_h (4H, H),
    b (4H) (gate blocks i, f, o, g). A 2-D x is (T·N, I), row t·N + n, N = batch_size, with top
    (T·N, H) and clip of T·N values; x with 3 or more axes is (T, N, ...) with top (T, N, H) and
    clip (T, N). Without a clip bottom clip_t = 0 at t = 0 and 1 after. Each call starts from
    zeros (no carry-over). clipping_threshold only clips gradients and is ignored.
    """

    type = "Lstm"
    tensorrt_missing_reason = "expanded by the recurrent rewrite first (run the default pipeline)"
    param = "lstm_param"
    n_bottoms = (1, 2)

    @staticmethod
    def parse(p):
        return {"num_output": p.num_output, "batch_size": p.batch_size}

    @staticmethod
    def infer(node: Node, *shapes: Shape) -> tuple[Shape, ...]:
        steps, batch, _ = _fork_layout(node, shapes)
        hidden = node.attrs["num_output"]
        if len(shapes[0]) == 2:
            return ((steps * batch, hidden),)
        return ((steps, batch, hidden),)

    @staticmethod
    def blobs(node: Node, *shapes: Shape) -> tuple[tuple[str, Shape], ...]:
        _, _, inputs = _fork_layout(node, shapes)
        hidden = node.attrs["num_output"]
        gates = len(CAFFE_GATES) * hidden
        return ("W_x", (gates, inputs)), ("W_h", (gates, hidden)), ("b", (gates,))

    @staticmethod
    def numpy(node: Node, *arrays):
        x, *clip_bottom = [np.asarray(a, np.float64) for a in arrays[:len(node.inputs)]]
        w_x, w_h, b = [np.asarray(a, np.float64) for a in arrays[len(node.inputs):]]
        steps, batch, inputs = _fork_sequence(node, x.shape)
        hidden = node.attrs["num_output"]
        clip = clip_bottom[0].reshape(steps, batch) if clip_bottom else _fresh_clip(steps, batch)
        x_proj = _project_inputs(x.reshape(steps, batch, inputs), w_x, b)
        zeros = np.zeros((batch, hidden))
        h, _, _ = _run_lstm(x_proj, clip, zeros, zeros, _Cell(w_h))
        return _float32(h.reshape(steps * batch, hidden) if x.ndim == 2 else h)


def _fresh_clip(steps: int, batch: int) -> np.ndarray:
    """The fork's implicit clip without a clip bottom: 0 at t = 0, 1 afterwards."""
    clip = np.ones((steps, batch))
    clip[0] = 0.0
    return clip
