"""Recurrent layers executed directly from their equations: LSTM, RNN and the fork type Lstm.

These facets are the ground truth that the LSTM expansion pass is checked against, so the math
is written out literally, step by step, in float64 (float32 in and out).

Each ``numpy`` call is one Forward from a zero initial state (or from the h_0/c_0 bottoms with
``expose_hidden``). Caffe without ``expose_hidden`` starts each Forward from the previous
Forward's h_T/c_T (recurrent_layer.cpp); that hidden carry-over is not modelled here: it is a
later CLI option. With cont_1 = 0 (the usual deploy case) the two agree.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caffe_lstm.errors import UnsupportedLayerError
from caffe_lstm.ir.graph import Node, Shape
from caffe_lstm.ops.registry import Op, count, register_op, shape_error

#: The gate blocks along every 4H axis of Caffe's LSTM blobs, in order (lstm_unit_layer.cpp).
CAFFE_GATES = ("i", "f", "o", "g")

#: The recurrent_param extension fields (spec/recurrent-extensions.md) with their defaults and
#: the variant each one selects. This round runs only the plain cell: other values are rejected.
_EXTENSIONS = {
    "candidate_activation": ("TANH", "another candidate activation"),
    "cell_activation": ("TANH", "another cell output activation"),
    "relu_clip": (20.0, "a clipped-ReLU ceiling"),
    "peephole": (False, "peephole connections"),
    "num_proj": (0, "a recurrent projection (LSTMP)"),
    "cell_clip": (0.0, "cell clipping"),
}


def _parse_extensions(p: Any) -> dict[str, Any]:
    """The extension fields written with a non-default value (``infer`` rejects them)."""
    return {name: getattr(p, name) for name, (default, _) in _EXTENSIONS.items()
            if p.has(name) and getattr(p, name) != default}


def _reject_extensions(node: Node) -> None:
    """Raises UnsupportedLayerError naming every extension field the node sets."""
    fields = node.attrs.get("extensions", {})
    if fields:
        found = ", ".join(f"recurrent_param.{name}: {_prototxt(value)} "
                          f"({_EXTENSIONS[name][1]})" for name, value in fields.items())
        raise UnsupportedLayerError(
            f"{found} not supported yet", node.label,
            "only Caffe's plain LSTM cell runs in this version; remove the field")


def _prototxt(value: Any) -> str:
    """A value spelled as in a prototxt (``true``, ``16``, ``RELU``)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


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


def _recurrent_layout(node: Node, shapes: tuple[Shape, ...], states: tuple[str, ...]
                      ) -> tuple[int, int, int, int | None]:
    """Validates the bottoms x, cont, [x_static], [states]; returns T, N, I and S (or None)."""
    _reject_extensions(node)
    hidden = node.attrs["num_output"]
    _check_num_output(node, hidden, "recurrent_param")
    exposed = states if node.attrs["expose_hidden"] else ()
    _check_bottom_count(node, len(shapes), exposed)
    x, cont = shapes[0], shapes[1]
    _check_x(node, x)
    steps, batch = x[0], x[1]
    _check_exact(node, "cont", cont, (steps, batch))
    static = shapes[2] if len(shapes) == 3 + len(exposed) else None
    if static is not None:
        _check_static(node, static, batch)
    for name, shape in zip(exposed, shapes[len(shapes) - len(exposed):]):
        _check_exact(node, name, shape, (1, batch, hidden))
    return steps, batch, count(x, 2), None if static is None else count(static, 1)


# ---- the equations ----------------------------------------------------------------------------


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _project_inputs(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """x_transform: X = x·Wᵀ + b for all steps at once, x flattened from axis 2 (T, N, out)."""
    steps, batch = x.shape[:2]
    return x.reshape(steps, batch, count(x.shape, 2)) @ w.T + b


def _project_static(x_static: np.ndarray | None, w: list[np.ndarray]) -> np.ndarray | float:
    """W_xc_x_static = x_static·W_staticᵀ (no bias) -> (N, out); 0 without a static input."""
    if x_static is None:
        return 0.0
    return x_static.reshape(x_static.shape[0], -1) @ w[0].T


def _split_gates(gate_input: np.ndarray) -> dict[str, np.ndarray]:
    """The 4H pre-activations cut into H-wide blocks, by gate name."""
    return dict(zip(CAFFE_GATES, np.split(gate_input, len(CAFFE_GATES), axis=-1)))


def _lstm_step(x_proj_t: np.ndarray, cont_t: np.ndarray, h: np.ndarray, c: np.ndarray,
               w_hc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One step of lstm_layer.cpp's unrolled net and LSTMUnit; h, c are (N, H), cont_t (N,)."""
    cont = cont_t[:, None]
    # h_conted_{t-1} = cont_t · h_{t-1}   (a product, not a select: non-binary cont is linear)
    h_conted = cont * h
    # gate_input_t = W_hc·h_conted_{t-1} + W_xc_x_t (+ W_xc_x_static, already in x_proj_t)
    gates = _split_gates(h_conted @ w_hc.T + x_proj_t)
    i = _sigmoid(gates["i"])
    f = _sigmoid(gates["f"])
    o = _sigmoid(gates["o"])
    g = np.tanh(gates["g"])
    # c_t = cont_t·f_t·c_{t-1} + i_t·g_t
    c = cont * f * c + i * g
    # h_t = o_t·tanh(c_t)
    h = o * np.tanh(c)
    return h, c


def _run_lstm(x_proj: np.ndarray, cont: np.ndarray, h: np.ndarray, c: np.ndarray,
              w_hc: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All T steps from (h_0, c_0): returns the stacked h (T, N, H), h_T and c_T (N, H)."""
    hs = []
    for x_proj_t, cont_t in zip(x_proj, cont):
        h, c = _lstm_step(x_proj_t, cont_t, h, c, w_hc)
        hs.append(h)
    return np.stack(hs), h, c


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


def _split_arrays(node: Node, arrays: tuple[np.ndarray, ...], states: tuple[str, ...]):
    """A numpy facet's arguments as float64 (x, cont, x_static or None, exposed states, blobs)."""
    n_bottoms = len(node.inputs)
    x, cont, *extra = [np.asarray(a, np.float64) for a in arrays[:n_bottoms]]
    blobs = [np.asarray(a, np.float64) for a in arrays[n_bottoms:]]
    n_exposed = len(states) if node.attrs["expose_hidden"] else 0
    x_static = extra[0] if len(extra) > n_exposed else None
    return x, cont, x_static, extra[len(extra) - n_exposed:], blobs


def _initial_state(exposed: list[np.ndarray], index: int, batch: int, hidden: int) -> np.ndarray:
    """State ``index`` from the exposed (1, N, H) bottoms, else zeros (one fresh Forward)."""
    return exposed[index].reshape(batch, hidden) if exposed else np.zeros((batch, hidden))


def _float32(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    return tuple(np.asarray(a, np.float32) for a in arrays)


# ---- the ops ----------------------------------------------------------------------------------


@register_op
class LSTM(Op):
    """Caffe's LSTM over T steps (recurrent_param: num_output H, expose_hidden).

    Bottoms x (T, N, ...), cont (T, N), [x_static (N, ...)], [h_0, c_0 (1, N, H)];
    tops h (T, N, H) [, h_T, c_T (1, N, H)]. Blobs W_xc (4H, I), b_c (4H),
    [W_xc_static (4H, S)], W_hc (4H, H), gate blocks i, f, o, g. Per step:
    a_t = W_hc·(cont_t·h_{t-1}) + W_xc·x_t + b_c [+ W_xc_static·x_static];
    c_t = cont_t·σ(a_f)·c_{t-1} + σ(a_i)·tanh(a_g); h_t = σ(a_o)·tanh(c_t).
    Without expose_hidden each call starts from zeros (no carry-over between calls).
    """

    type = "LSTM"
    tensorrt_missing_reason = "expanded by the recurrent rewrite first (run the default pipeline)"
    param = "recurrent_param"
    n_bottoms = (2, 5)
    n_tops = (1, 3)
    states = ("h_0", "c_0")

    @staticmethod
    def parse(p):
        return {"num_output": p.num_output, "expose_hidden": p.expose_hidden,
                "extensions": _parse_extensions(p)}

    @staticmethod
    def infer(node: Node, *shapes: Shape) -> tuple[Shape, ...]:
        steps, batch, _, _ = _recurrent_layout(node, shapes, LSTM.states)
        hidden = node.attrs["num_output"]
        if node.attrs["expose_hidden"]:
            _check_top_count(node, 3, "h, h_T, c_T")
            return (steps, batch, hidden), (1, batch, hidden), (1, batch, hidden)
        _check_top_count(node, 1, "h", "h_T and c_T are tops only with expose_hidden")
        return ((steps, batch, hidden),)

    @staticmethod
    def blobs(node: Node, *shapes: Shape) -> tuple[tuple[str, Shape], ...]:
        _, _, inputs, static = _recurrent_layout(node, shapes, LSTM.states)
        gates = len(CAFFE_GATES) * node.attrs["num_output"]
        static_blob = (("W_xc_static", (gates, static)),) if static is not None else ()
        return (("W_xc", (gates, inputs)), ("b_c", (gates,)), *static_blob,
                ("W_hc", (gates, node.attrs["num_output"])))

    @staticmethod
    def numpy(node: Node, *arrays):
        x, cont, x_static, exposed, blobs = _split_arrays(node, arrays, LSTM.states)
        w_xc, b_c, *w_static, w_hc = blobs
        batch, hidden = x.shape[1], node.attrs["num_output"]
        # W_xc_x_t + W_xc_x_static: the static term is the same at every step
        x_proj = _project_inputs(x, w_xc, b_c) + _project_static(x_static, w_static)
        h0 = _initial_state(exposed, 0, batch, hidden)
        c0 = _initial_state(exposed, 1, batch, hidden)
        h, h_last, c_last = _run_lstm(x_proj, cont, h0, c0, w_hc)
        if node.attrs["expose_hidden"]:
            return _float32(h, h_last[None], c_last[None])
        return _float32(h)


@register_op
class RNN(Op):
    """Caffe's vanilla RNN over T steps (recurrent_param: num_output H, expose_hidden).

    Bottoms x (T, N, ...), cont (T, N), [x_static (N, ...)], [h_0 (1, N, H)]; tops o (T, N, H)
    [, h_T (1, N, H)]. Blobs W_xh (H, I), b_h (H), [W_xh_static (H, S)], W_hh, W_ho (H, H),
    b_o (H). Per step:
    h_t = tanh(W_hh·(cont_t·h_{t-1}) + W_xh·x_t + b_h [+ W_xh_static·x_static]);
    o_t = tanh(W_ho·h_t + b_o). Without expose_hidden each call starts from zeros.
    """

    type = "RNN"
    tensorrt_missing_reason = "expanded by the recurrent rewrite first (run the default pipeline)"
    param = "recurrent_param"
    n_bottoms = (2, 4)
    n_tops = (1, 2)
    states = ("h_0",)

    @staticmethod
    def parse(p):
        return {"num_output": p.num_output, "expose_hidden": p.expose_hidden,
                "extensions": _parse_extensions(p)}

    @staticmethod
    def infer(node: Node, *shapes: Shape) -> tuple[Shape, ...]:
        steps, batch, _, _ = _recurrent_layout(node, shapes, RNN.states)
        hidden = node.attrs["num_output"]
        if node.attrs["expose_hidden"]:
            _check_top_count(node, 2, "o, h_T")
            return (steps, batch, hidden), (1, batch, hidden)
        _check_top_count(node, 1, "o", "h_T is a top only with expose_hidden")
        return ((steps, batch, hidden),)

    @staticmethod
    def blobs(node: Node, *shapes: Shape) -> tuple[tuple[str, Shape], ...]:
        _, _, inputs, static = _recurrent_layout(node, shapes, RNN.states)
        hidden = node.attrs["num_output"]
        static_blob = (("W_xh_static", (hidden, static)),) if static is not None else ()
        return (("W_xh", (hidden, inputs)), ("b_h", (hidden,)), *static_blob,
                ("W_hh", (hidden, hidden)), ("W_ho", (hidden, hidden)), ("b_o", (hidden,)))

    @staticmethod
    def numpy(node: Node, *arrays):
        x, cont, x_static, exposed, blobs = _split_arrays(node, arrays, RNN.states)
        w_xh, b_h, *w_static, w_hh, w_ho, b_o = blobs
        # W_xh_x_t + W_xh_x_static: the static term is the same at every step
        x_proj = _project_inputs(x, w_xh, b_h) + _project_static(x_static, w_static)
        h = _initial_state(exposed, 0, x.shape[1], node.attrs["num_output"])
        outputs = []
        for x_proj_t, cont_t in zip(x_proj, cont):
            o, h = _rnn_step(x_proj_t, cont_t, h, w_hh, w_ho, b_o)
            outputs.append(o)
        if node.attrs["expose_hidden"]:
            return _float32(np.stack(outputs), h[None])
        return _float32(np.stack(outputs))


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
        h, _, _ = _run_lstm(x_proj, clip, zeros, zeros, w_h)
        return _float32(h.reshape(steps * batch, hidden) if x.ndim == 2 else h)


def _fresh_clip(steps: int, batch: int) -> np.ndarray:
    """The fork's implicit clip without a clip bottom: 0 at t = 0, 1 afterwards."""
    clip = np.ones((steps, batch))
    clip[0] = 0.0
    return clip
